"""The on-policy loop of A2C and PPO: collect an n_steps rollout on num_envs envs, compute advantages, update; log, evaluate.

TF calls: zero per rollout step and exactly one per update. Acting, V(final obs)
of truncated episodes and V(s_T) at the rollout's end run on a NumPy mirror of
the network (a TF call costs ~300 µs of fixed overhead on a 2-core CPU, a NumPy
forward pass of the small MLPs ~10-20 µs); advantages are computed in NumPy;
the one train call (one gradient step for A2C, n_epochs passes of minibatch
steps for PPO) also returns the weights that refresh the mirror. That is
1 / (num_envs * n_steps) TF calls per env step: 1/40 = 0.025 with SB3's A2C
settings (8 envs, 5 steps). Off that path, each log line writes TensorBoard
summaries (tfrl.metrics) and each evaluation runs the NumPy greedy policy.

The agents differ only in their learner: `learner.update(rollout, rollout_start,
learning_rate)` takes the flattened rollout (with the log-probabilities of the
sampled actions, which PPO's ratio needs) and the env step where the rollout
started (the clock of every schedule), and returns (metrics, weights). The
config fields the loop reads are the same in A2CConfig and PPOConfig.

Checkpoints (tfrl.checkpoints) every `checkpoint_interval` env steps and at the
end, always between updates, hold the learner's variables (network, optimizer,
update counter), the actor's RNG state and the loop's deadlines; no arrays (the
rollout buffers are empty between updates). A run whose run_dir holds a
checkpoint resumes from it with the same env step (so the learning-rate schedule
continues from there); the envs restart from a fresh reset, so episodes in
flight at the checkpoint are lost.
"""

from __future__ import annotations

import pathlib
import time
from types import ModuleType
from typing import Callable, NamedTuple

import numpy as np

from tfrl import best_policy, checkpoints, envs, evaluation, networks, numerics, schedules, shutdown
from tfrl.agents.a2c.actor import A2CActor
from tfrl.agents.a2c.learning import bootstrap_truncated, explained_variance, n_step_advantages
from tfrl.deadlines import next_deadline
from tfrl.metrics import MetricsLogger
from tfrl.runtime import Runtime


class Rollout(NamedTuple):
    """One update's data, flattened over (time, env) to B = n_steps * num_envs rows."""
    obs: np.ndarray  # s_t [B, *obs_shape] float32
    actions: np.ndarray  # a_t [B] int32
    advantages: np.ndarray  # A_t [B] float32 (GAE)
    returns: np.ndarray  # G_t = A_t + V(s_t) [B] float32, the value targets
    log_probs: np.ndarray  # log pi_old(a_t | s_t) [B] float32, of the policy that acted


def learning_rate_at(env_step: int, config) -> float:
    """Step size for the update whose rollout starts at `env_step` (config.lr_schedule)."""
    return schedules.scheduled(config.learning_rate, config.lr_schedule, env_step, config.total_env_steps)


def train(make_learner: Callable, policy_module: ModuleType, config, env_id: str, seed: int, runtime: Runtime,
          run_dir: pathlib.Path, vector_mode: str = "sync", progress_bar: bool | None = None,
          stop_requested: Callable[[], bool] = shutdown.never,
          keep_checkpoints: int | None = checkpoints.KEEP_CHECKPOINTS) -> dict:
    """Train for config.total_env_steps env steps (rounded up to whole rollouts); returns the final greedy evaluation record.

    When stop_requested() turns true (tfrl.shutdown), saves a checkpoint after the current update and returns
    {"kind": "stopped", "env_step", "checkpoint"} instead. With keep_best_policy the record's "best" holds the
    best policy's final evaluation (tfrl.best_policy). keep_checkpoints: the newest kept, None = all.
    make_learner(config, env_info, runtime, seed) builds the agent's learner; policy_module is the agent's
    `tfrl.agents.<agent>.policy` (its serving_policy saves and loads the best policy).
    """
    env = envs.make_vector_env(env_id, config.num_envs, seed=seed, vector_mode=vector_mode)
    info = envs.env_info(env, env_id)
    learner = make_learner(config, info, runtime, seed)
    mirror = networks.NumpyActorCritic(learner.network, config.activation)
    actor = A2CActor(mirror, learner.head, seed=seed)
    checkpointer = checkpoints.Checkpointer(run_dir, learner.checkpoint_items(), keep=keep_checkpoints)

    num_steps, num_envs = config.n_steps, config.num_envs  # T, N
    rollout_obs = np.zeros((num_steps, num_envs, *info.obs_shape), np.float32)  # s_t [T, N, ...]
    rollout_actions = np.zeros((num_steps, num_envs), np.int32)  # a_t [T, N]
    rollout_rewards = np.zeros((num_steps, num_envs), np.float32)  # r_t (+ gamma V(final obs) if truncated) [T, N]
    rollout_dones = np.zeros((num_steps, num_envs), np.float32)  # 1 if the episode ended at t [T, N]
    rollout_values = np.zeros((num_steps, num_envs), np.float32)  # V(s_t) [T, N]
    rollout_policy_params = np.zeros((num_steps, num_envs, learner.head.num_params), np.float32)  # [T, N, P]

    obs = env.first_obs
    env_step = 0
    updates = 0
    next_log_at = config.log_interval
    next_eval_at = config.eval_interval or None
    next_checkpoint_at = config.checkpoint_interval or None
    train_metrics: dict[str, float] = {}
    restored = checkpointer.restore_latest(load_arrays=False)
    if restored is not None:
        env_step, state = restored.env_step, restored.loop_state
        updates = state["updates"]
        next_log_at, next_eval_at, next_checkpoint_at = (state[name] for name in _DEADLINES)
        checkpoints.set_rng_state(actor.rng, state["actor_rng"])
        mirror.update([v.numpy() for v in learner.network.trainable_variables])
        obs = envs.reset_for_resume(env, seed, env_step)
    best_keeper = None  # keep_best_policy: tfrl.best_policy
    if config.keep_best_policy:
        policy_items = policy_module.serving_policy(config, info, learner.network).checkpoint_items
        best_keeper = best_policy.BestPolicy(run_dir, policy_items, start_over=restored is None)
    logger = MetricsLogger(run_dir, config.total_env_steps, progress_bar, start_env_step=env_step)
    last_log_time, last_log_step = time.perf_counter(), env_step
    try:
        while env_step < config.total_env_steps:
            if stop_requested():
                number = _save_checkpoint(checkpointer, env_step, updates,
                                          (next_log_at, next_eval_at, next_checkpoint_at), actor)
                return {"kind": "stopped", "env_step": env_step, "checkpoint": number}
            rollout_start = env_step
            learning_rate = learning_rate_at(rollout_start, config)
            for t in range(num_steps):
                action, value, policy_params = actor.act(obs)
                rollout_obs[t] = obs
                rollout_actions[t] = action
                rollout_values[t] = value
                rollout_policy_params[t] = policy_params
                next_obs, reward, terminated, truncated, infos = env.step(action)
                env_step += num_envs
                done = terminated | truncated
                if truncated.any():
                    # A time-limit truncation is no terminal state: bootstrap from V(the episode's last obs)
                    # through the reward (see learning.py).
                    final_obs = envs.next_obs_for_storage(next_obs, done, infos)  # [N, ...]
                    reward = bootstrap_truncated(reward, terminated, truncated, actor.value(final_obs), config.gamma)
                rollout_rewards[t] = reward
                rollout_dones[t] = done
                for episode_return, length in envs.finished_episodes(done, infos):
                    logger.episode(env_step, episode_return, length)
                # The next obs of finished envs is already the reset obs (SAME_STEP autoreset).
                obs = np.array(next_obs, dtype=np.float32)  # a copy: the vector env reuses its buffer

            last_value = actor.value(obs)  # V(s_T) [N]
            advantages, returns = n_step_advantages(rollout_rewards, rollout_values, rollout_dones, last_value,
                                                    config.gamma, config.gae_lambda)  # [T, N] each
            actions = rollout_actions.reshape(-1)
            # log pi_old(a|s) of the acting policy, once per rollout: one NumPy call, not one per vector step.
            log_probs = learner.head.log_prob_numpy(rollout_policy_params.reshape(len(actions), -1), actions)
            train_metrics, weights = learner.update(Rollout(
                rollout_obs.reshape(num_steps * num_envs, *info.obs_shape), actions, advantages.reshape(-1),
                returns.reshape(-1), log_probs), rollout_start, learning_rate)
            mirror.update(weights)
            updates += 1

            if env_step >= next_log_at:
                now = time.perf_counter()
                logger.log("train", env_step, {
                    **train_metrics,
                    "explained_variance": explained_variance(rollout_values, returns),
                    "learning_rate": learning_rate,
                    "env_steps_per_s": (env_step - last_log_step) / (now - last_log_time),
                    "updates": updates,
                })
                last_log_time, last_log_step = now, env_step
                next_log_at = next_deadline(next_log_at, env_step, config.log_interval)
            if next_eval_at is not None and env_step >= next_eval_at:
                eval_start = time.perf_counter()
                eval_returns = evaluation.evaluate(actor.greedy, env_id, config.eval_episodes,
                                                   seed=seed + evaluation.PERIODIC_SEED_OFFSET)
                logger.log("eval", env_step, {"return_mean": float(eval_returns.mean()),
                                              "return_std": float(eval_returns.std())})
                if best_keeper is not None:
                    best_keeper.offer(env_step, float(eval_returns.mean()))
                next_eval_at = next_deadline(next_eval_at, env_step, config.eval_interval)
                last_log_time += time.perf_counter() - eval_start  # env_steps_per_s measures training only
            if next_checkpoint_at is not None and env_step >= next_checkpoint_at:
                checkpoint_start = time.perf_counter()
                next_checkpoint_at = next_deadline(next_checkpoint_at, env_step, config.checkpoint_interval)
                _save_checkpoint(checkpointer, env_step, updates, (next_log_at, next_eval_at, next_checkpoint_at),
                                 actor)
                last_log_time += time.perf_counter() - checkpoint_start
        _save_checkpoint(checkpointer, env_step, updates, (next_log_at, next_eval_at, next_checkpoint_at), actor)
        eval_returns = evaluation.evaluate(actor.greedy, env_id, config.final_eval_episodes,
                                           seed=seed + evaluation.FINAL_SEED_OFFSET)
        final = logger.log("final_eval", env_step, {
            "return_mean": float(eval_returns.mean()), "return_std": float(eval_returns.std()),
            "episodes": len(eval_returns), "updates": updates})
        if best_keeper is not None:
            final["best"] = best_policy.log_final_evaluation(
                run_dir, policy_module.serving_policy(config, info), info.obs_shape, env_id, config.final_eval_episodes,
                seed + evaluation.FINAL_SEED_OFFSET, logger, env_step)
        return final
    except numerics.NonFiniteError as error:
        raise error.at(env_step, checkpointer.last) from None  # nothing saved: the newest checkpoint stays good
    finally:
        env.close()
        logger.close()


_DEADLINES = ("next_log_at", "next_eval_at", "next_checkpoint_at")


def _save_checkpoint(checkpointer, env_step, updates, deadlines, actor) -> int:
    """All the loop needs to continue from env_step, between two updates (see the module docstring)."""
    return checkpointer.save(env_step, {**dict(zip(_DEADLINES, deadlines)), "updates": updates,
                                        "actor_rng": checkpoints.rng_state(actor.rng)})
