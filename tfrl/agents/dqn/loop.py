"""The DQN environment loop: act, store, train every `train_freq` env steps, log, evaluate.

TF calls per env step: one train call every `train_freq` env steps (K gradient
steps inside it); acting runs in NumPy. With the SB3-zoo LunarLander settings
(train_freq 4, 1 env) that is 0.25 TF calls per env step.

Checkpoints (tfrl.checkpoints) every `checkpoint_interval` env steps and at the
end hold the learner's variables, the replay buffer, the RNG states and the
loop's deadlines. A run whose run_dir holds a checkpoint resumes from it with
the same env step, epsilon and replay content; the envs restart from a fresh
reset, so episodes in flight at the checkpoint (and their n-step transitions)
are lost.
"""

from __future__ import annotations

import pathlib
import time
from typing import Callable

import numpy as np

from tfrl import best_policy, checkpoints, distribute, envs, evaluation, networks, numerics, shutdown
from tfrl.agents.dqn import policy as dqn_policy
from tfrl.agents.dqn.actor import EpsilonGreedyActor, linear_epsilon
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, check_distribution
from tfrl.deadlines import next_deadline
from tfrl.metrics import MetricsLogger
from tfrl.replay import NStepBuilder, UniformReplay
from tfrl.runtime import Runtime


def check_runtime(config: DQNConfig, runtime: Runtime) -> None:
    """UsageError if `config` cannot train under `runtime`'s strategy; writes nothing.

    With several workers, every train call is a collective: all workers must make it at the same env step.
    The loop trains once env_step reaches the deadline *and* the replay holds a batch; the replay's size depends
    on when each worker's episodes ended (n-step flushes), so the first deadline must guarantee a full batch
    everywhere. After v vector steps each of the num_envs envs has emitted at least v - n_step + 1 transitions.
    """
    check_distribution(config, runtime)
    best_policy.check_runtime(config.keep_best_policy, runtime)
    if runtime.cluster.num_workers == 1:
        return
    first_train_at = max(config.learning_starts, config.train_freq)
    vector_steps = -(-first_train_at // config.num_envs)
    guaranteed = config.num_envs * max(0, vector_steps - config.n_step + 1)
    if guaranteed < config.batch_size:
        needed = config.num_envs * (-(-config.batch_size // config.num_envs) + config.n_step - 1)
        raise distribute.DistributeConfigError(
            f"multi_worker DQN: at the first train call (env step {first_train_at}) a worker's replay may hold "
            f"fewer than batch_size={config.batch_size} transitions, and workers must train at the same env "
            f"steps; raise learning_starts to at least {needed}")


def train(config: DQNConfig, env_id: str, seed: int, runtime: Runtime, run_dir: pathlib.Path,
          vector_mode: str = "sync", progress_bar: bool | None = None,
          stop_requested: Callable[[], bool] = shutdown.never,
          keep_checkpoints: int | None = checkpoints.KEEP_CHECKPOINTS) -> dict:
    """Train for config.total_env_steps env steps; returns the final greedy evaluation record.

    When stop_requested() turns true (tfrl.shutdown), saves a checkpoint at the current env step and returns
    {"kind": "stopped", "env_step", "checkpoint"} instead. With keep_best_policy the record's "best" holds the
    best policy's final evaluation (tfrl.best_policy). keep_checkpoints: the newest kept, None = all.
    """
    env = envs.make_vector_env(env_id, config.num_envs, seed=seed, vector_mode=vector_mode)
    info = envs.env_info(env, env_id)
    learner = DQNLearner(config, info, runtime)
    q_mirror = networks.NumpyMLP(learner.online)
    actor = EpsilonGreedyActor(q_mirror, info.num_actions, seed=seed)
    replay = UniformReplay(config.replay_capacity, info.obs_shape, seed=seed)
    nstep = NStepBuilder(config.n_step, config.gamma, config.num_envs)
    checkpointer = checkpoints.Checkpointer(run_dir, learner.checkpoint_items(), keep=keep_checkpoints)

    obs = env.first_obs
    env_step = 0
    next_train_at = max(config.learning_starts, config.train_freq)
    next_target_update_at = config.target_update_period
    next_log_at = config.log_interval
    next_eval_at = config.eval_interval or None
    next_checkpoint_at = config.checkpoint_interval or None
    train_metrics = {"loss": float("nan"), "q_mean": float("nan")}
    restored = checkpointer.restore_latest()
    if restored is not None:
        env_step, state = restored.env_step, restored.loop_state
        next_train_at, next_target_update_at, next_log_at, next_eval_at, next_checkpoint_at = (
            state[name] for name in _DEADLINES)
        train_metrics = state["train_metrics"]
        checkpoints.set_rng_state(actor.rng, state["actor_rng"])
        replay.restore_checkpoint_state(restored.arrays, state["replay"])
        q_mirror.update([v.numpy() for v in learner.online.trainable_variables])
        obs = envs.reset_for_resume(env, seed, env_step)
    best_keeper = None  # keep_best_policy: tfrl.best_policy
    if config.keep_best_policy:
        policy_items = dqn_policy.serving_policy(config, info, learner.online).checkpoint_items
        best_keeper = best_policy.BestPolicy(run_dir, policy_items, start_over=restored is None)
    logger = MetricsLogger(run_dir, config.total_env_steps, progress_bar, start_env_step=env_step)
    last_log_time, last_log_step = time.perf_counter(), env_step
    try:
        while env_step < config.total_env_steps:
            if stop_requested():
                number = _save_checkpoint(checkpointer, env_step, (next_train_at, next_target_update_at, next_log_at,
                                                                   next_eval_at, next_checkpoint_at), train_metrics,
                                          actor, replay)
                return {"kind": "stopped", "env_step": env_step, "checkpoint": number}
            epsilon = linear_epsilon(env_step, config)
            action = actor.act(obs, epsilon)
            next_obs, reward, terminated, truncated, infos = env.step(action)
            env_step += config.num_envs
            done = terminated | truncated
            stored_next_obs = envs.next_obs_for_storage(next_obs, done, infos)
            transitions = nstep.step(obs, action, reward, terminated, truncated, stored_next_obs)
            if transitions is not None:
                replay.add(*transitions)
            for episode_return, length in envs.finished_episodes(done, infos):
                logger.episode(env_step, episode_return, length)
            # The next obs of finished envs is already the reset obs (SAME_STEP autoreset).
            obs = np.array(next_obs, dtype=np.float32)

            if env_step >= next_train_at and replay.size >= config.batch_size:
                next_train_at = next_deadline(next_train_at, env_step, config.train_freq)
                # A target update that fell due since the last train call happens first in this one:
                # no gradient step ran in between, so it is the same as updating on time.
                update_target = env_step >= next_target_update_at
                if update_target:
                    next_target_update_at = next_deadline(next_target_update_at, env_step,
                                                           config.target_update_period)
                batch = replay.sample(config.batch_size, config.gradient_steps)
                train_metrics, weights = learner.train(batch, update_target)
                q_mirror.update(weights)

            if env_step >= next_log_at:
                now = time.perf_counter()
                logger.log("train", env_step, {
                    **train_metrics, "epsilon": epsilon,
                    "env_steps_per_s": (env_step - last_log_step) / (now - last_log_time),
                    "gradient_steps": int(learner.gradient_steps.numpy()),
                })
                last_log_time, last_log_step = now, env_step
                next_log_at = next_deadline(next_log_at, env_step, config.log_interval)
            if next_eval_at is not None and env_step >= next_eval_at:
                returns = evaluation.evaluate(actor.greedy, env_id, config.eval_episodes,
                                              seed=seed + evaluation.PERIODIC_SEED_OFFSET)
                logger.log("eval", env_step, {"return_mean": float(returns.mean()),
                                              "return_std": float(returns.std())})
                if best_keeper is not None:
                    best_keeper.offer(env_step, float(returns.mean()))
                next_eval_at = next_deadline(next_eval_at, env_step, config.eval_interval)
            if next_checkpoint_at is not None and env_step >= next_checkpoint_at:
                next_checkpoint_at = next_deadline(next_checkpoint_at, env_step, config.checkpoint_interval)
                _save_checkpoint(checkpointer, env_step, (next_train_at, next_target_update_at, next_log_at,
                                                          next_eval_at, next_checkpoint_at), train_metrics, actor, replay)
        _save_checkpoint(checkpointer, env_step, (next_train_at, next_target_update_at, next_log_at, next_eval_at,
                                                  next_checkpoint_at), train_metrics, actor, replay)
        returns = evaluation.evaluate(actor.greedy, env_id, config.final_eval_episodes,
                                      seed=seed + evaluation.FINAL_SEED_OFFSET)
        final = logger.log("final_eval", env_step, {
            "return_mean": float(returns.mean()), "return_std": float(returns.std()),
            "episodes": len(returns), "gradient_steps": int(learner.gradient_steps.numpy())})
        if best_keeper is not None:
            final["best"] = best_policy.log_final_evaluation(
                run_dir, dqn_policy.serving_policy(config, info), info.obs_shape, env_id, config.final_eval_episodes,
                seed + evaluation.FINAL_SEED_OFFSET, logger, env_step)
        return final
    except numerics.NonFiniteError as error:
        raise error.at(env_step, checkpointer.last) from None  # nothing saved: the newest checkpoint stays good
    finally:
        env.close()
        logger.close()


_DEADLINES = ("next_train_at", "next_target_update_at", "next_log_at", "next_eval_at", "next_checkpoint_at")


def _save_checkpoint(checkpointer, env_step, deadlines, train_metrics, actor, replay) -> int:
    """All the loop needs to continue from env_step, except n-step transitions in flight (see the module docstring)."""
    replay_arrays, replay_state = replay.checkpoint_state()
    return checkpointer.save(env_step, {**dict(zip(_DEADLINES, deadlines)), "train_metrics": train_metrics,
                                        "actor_rng": checkpoints.rng_state(actor.rng), "replay": replay_state},
                             replay_arrays)
