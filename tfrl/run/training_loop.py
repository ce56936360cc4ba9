"""The run loop, one for every agent: it owns the run's life and asks the agent only how to collect and train.

    restore       the newest loadable checkpoint of the run dir, if any (tfrl.run.checkpoints): the learner's
                  variables, the agent's state (replay, RNGs, ...) and the loop's deadlines; the envs
                  restart from a fresh reset, so episodes in flight at the checkpoint are lost
    each pass     a stop request (tfrl.run.shutdown) saves a checkpoint and returns; else agent.collect (one vector
                  step for DQN, one rollout for A2C/PPO), agent.train, then whatever fell due: a log record
                  (tfrl.run.metrics), a greedy evaluation (and the best policy, tfrl.run.best_policy), a checkpoint
    callbacks     hear of every log record and evaluation (tfrl.run.callbacks); one that returns True ends training
                  early, as if total_env_steps had been reached
    the end       a checkpoint, the final greedy evaluation, and the best policy's
    divergence    a NaN or Inf in training (tfrl.models.numerics) is re-raised naming the env step and the newest
                  checkpoint, which is left as it was

env_steps_per_s in the log measures collection and training only: evaluations and checkpoints are not timed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import time
from typing import Any, Callable, Sequence

from absl import logging

from tfrl import agents, envs
from tfrl.hardware import cpu_features, precision
from tfrl.hardware.runtime import Runtime
from tfrl.models import numerics
from tfrl.rollout_actors import ActorSettings
from tfrl.run import best_policy, checkpoints, evaluation, shutdown, warm_start
from tfrl.run.metrics import MetricsLogger, MetricsWriteError
from tfrl.schedules import next_deadline


@dataclasses.dataclass(frozen=True)
class LoopOptions:
    """How the loop runs, as opposed to what it learns (the agent's config)."""

    vector_mode: str = "sync"  # tfrl.envs.VECTOR_MODES
    progress_bar: bool | None = None  # None: when stdout is a terminal
    stop_requested: Callable[[], bool] = shutdown.never  # polled once per pass; True saves and returns
    keep_checkpoints: int | None = checkpoints.KEEP_CHECKPOINTS  # the newest kept; None keeps all
    callbacks: Sequence[Any] = ()  # tfrl.run.callbacks.Callback protocol
    init_from: Any = None  # tfrl.run.warm_start.Source: the weights a run without a checkpoint starts from
    actors: ActorSettings = ActorSettings()  # count > 0: the envs are stepped in Ray actors (Ray connected)


@dataclasses.dataclass
class Deadlines:
    """Env steps at which the next log record, evaluation and checkpoint fall due (None: never)."""

    log_at: int
    eval_at: int | None
    checkpoint_at: int | None

    @classmethod
    def first(cls, config) -> Deadlines:
        return cls(config.log_interval, config.eval_interval or None, config.checkpoint_interval or None)

    def to_json(self) -> dict:
        return {"next_log_at": self.log_at, "next_eval_at": self.eval_at, "next_checkpoint_at": self.checkpoint_at}

    @classmethod
    def from_json(cls, state: dict) -> Deadlines:
        return cls(state["next_log_at"], state["next_eval_at"], state["next_checkpoint_at"])


def train(agent: agents.RegisteredAgent, config, env: envs.EnvSpec | str, seed: int, runtime: Runtime, run_dir: pathlib.Path,
          options: LoopOptions = LoopOptions()) -> dict:
    """Train for config.total_env_steps env steps (a whole number of the agent's passes); returns the final
    greedy evaluation record, with "best" holding the best policy's (keep_best_policy runs).

    When options.stop_requested() turns true, saves a checkpoint and returns
    {"kind": "stopped", "env_step", "checkpoint"} instead.
    """
    env_spec = envs.as_spec(env)
    # With rollout actors, the envs here only describe the env: the actors step their own.
    vector_env = envs.make_vector_env(env_spec, 1 if options.actors.count else config.num_envs, seed=seed,
                                      vector_mode=options.vector_mode, training=True)
    try:
        return _Run(agent, config, vector_env, env_spec, seed, runtime, run_dir, options).run()
    finally:
        vector_env.close()


class _Run:
    def __init__(self, spec: agents.RegisteredAgent, config, env, env_spec: envs.EnvSpec, seed: int, runtime: Runtime,
                 run_dir: pathlib.Path, options: LoopOptions):
        self.spec, self.config, self.env_spec, self.seed, self.run_dir = spec, config, env_spec, seed, run_dir
        self.options = options
        self.stopped_by = None  # the callback that ended training early
        self.info = envs.env_info(env, env_spec.name)
        spec.check_env(self.info, config)
        if spec.convolves(config, self.info):
            for line in precision.cnn_precision_advice(runtime, cpu_features.bf16_flags()):
                logging.warning("%s", line)
        self.agent = spec.build(config, self.info, runtime, seed)
        self.checkpointer = checkpoints.Checkpointer(run_dir, self.agent.learner.checkpoint_items(),
                                                     keep=options.keep_checkpoints)
        self.env = self._stepper(env)
        self.deadlines = Deadlines.first(config)
        restored = self._restore()
        if restored is None and options.init_from is not None:
            warm_start.load(options.init_from, self.agent)
            logging.info("starting from the weights of %s", options.init_from.describe())
        self.best = None
        if config.keep_best_policy:
            self.best = best_policy.BestPolicy(run_dir, self.agent.serving_policy().checkpoint_items,
                                               start_over=restored is None)
        wall_time = float(restored.loop_state.get("wall_time_s", 0.0)) if restored is not None else 0.0
        self.logger = MetricsLogger(run_dir, config.total_env_steps, options.progress_bar,
                                    start_env_step=self.env.env_step, start_wall_time=wall_time,
                                    final_eval_episodes=config.final_eval_episodes)
        self._rate_since = (time.perf_counter(), self.env.env_step)  # (time, env step) of the last log record

    def _stepper(self, env):
        """What steps the envs: a VectorStepper on `env`, or the agent's rollout actors (--actors)."""
        def on_episode(*episode):
            self.logger.episode(*episode)

        if not self.options.actors.count:
            return envs.VectorStepper(env, on_episode=on_episode)
        return self.spec.rollout_actors(self.agent, self.env_spec, self.options.actors, self.seed,
                                        self.options.vector_mode, on_episode)

    def _restore(self) -> checkpoints.Restored | None:
        def apply(restored: checkpoints.Restored) -> None:  # a state that does not fit: the previous checkpoint
            self.deadlines = Deadlines.from_json(restored.loop_state)
            self.agent.restore(restored.loop_state, restored.arrays)

        restored = self.checkpointer.restore_latest(apply=apply)
        if restored is not None:
            self.env.resume_at(self.seed, restored.env_step)
        return restored

    def run(self) -> dict:
        try:
            while self.env.env_step < self.config.total_env_steps and self.stopped_by is None:
                if self.options.stop_requested():
                    return {"kind": "stopped", "env_step": self.env.env_step, "checkpoint": self._save()}
                self.agent.collect(self.env)
                self.agent.train(self.env.env_step)
                self._whatever_fell_due()
                self.logger.tick(self.env.env_step)
            self.agent.settle()
            self._save()
            try:
                return self._final_evaluation()
            except evaluation.Stopped as stopped:  # training is saved: the same command evaluates again
                logging.info("stop requested: the final evaluation %s; the run is saved, not complete", stopped)
                return {"kind": "stopped", "env_step": self.env.env_step, "checkpoint": self.checkpointer.last[1]}
        except evaluation.Stopped as stopped:  # a periodic evaluation: it comes again when the run resumes
            logging.info("stop requested: the evaluation at env step %d %s", self.env.env_step, stopped)
            return {"kind": "stopped", "env_step": self.env.env_step, "checkpoint": self._save()}
        except numerics.NonFiniteError as error:
            # Nothing was saved after the bad step: the newest checkpoint stays the last good one.
            raise error.at(self.env.env_step, self.checkpointer.last) from None
        except (MetricsWriteError, envs.EnvStepError) as error:  # a full disk outside a checkpoint, a broken env
            raise error.at(self.checkpointer.last) from None
        finally:
            self.logger.close()
            self.agent.close()
            self.env.close()

    def _whatever_fell_due(self) -> None:
        env_step, deadlines, config = self.env.env_step, self.deadlines, self.config
        if env_step >= deadlines.log_at:
            self._log_train(env_step)
            deadlines.log_at = next_deadline(deadlines.log_at, env_step, config.log_interval)
        if deadlines.eval_at is not None and env_step >= deadlines.eval_at:
            with self._untimed():
                self._evaluate(env_step)
            deadlines.eval_at = next_deadline(deadlines.eval_at, env_step, config.eval_interval)
        if deadlines.checkpoint_at is not None and env_step >= deadlines.checkpoint_at:
            deadlines.checkpoint_at = next_deadline(deadlines.checkpoint_at, env_step, config.checkpoint_interval)
            with self._untimed():
                self._save()

    def _log_train(self, env_step: int) -> None:
        self.agent.settle()  # the counters and metrics of every call made so far
        now = time.perf_counter()
        since_time, since_step = self._rate_since
        record = self.logger.log("train", env_step, {**self.agent.log_values(), **self.env.log_values(),
                                                     "env_steps_per_s": (env_step - since_step) / (now - since_time),
                                                     **self.agent.counters()})
        self._rate_since = (now, env_step)
        self._tell_callbacks("on_log", record)

    def _evaluate(self, env_step: int) -> None:
        self.agent.settle()
        with self.logger.evaluating(episodes=self.config.eval_episodes):
            returns = evaluation.evaluate(self.agent.greedy, self.env_spec, self.config.eval_episodes,
                                          seed=self.seed + evaluation.PERIODIC_SEED_OFFSET,
                                          stop_requested=self.options.stop_requested)
        record = self.logger.log("eval", env_step, {"return_mean": float(returns.mean()),
                                                    "return_std": float(returns.std())})
        if self.best is not None:
            self.best.offer(env_step, float(returns.mean()))
        self._tell_callbacks("on_eval", record)

    def _tell_callbacks(self, method: str, record: dict) -> None:
        for callback in self.options.callbacks:
            if getattr(callback, method)(dict(record)) and self.stopped_by is None:
                self.stopped_by = repr(callback)
                logging.info("%s ends training at env step %d", self.stopped_by, record["env_step"])

    def _save(self) -> int:
        """A checkpoint of everything needed to continue from the current env step."""
        agent_state, arrays = self.agent.checkpoint_state()
        loop_state = {**self.deadlines.to_json(), "wall_time_s": round(self.logger.wall_time(), 3), **agent_state}
        return self.checkpointer.save(self.env.env_step, loop_state, arrays)

    def _final_evaluation(self) -> dict[str, Any]:
        env_step, config = self.env.env_step, self.config
        self.logger.tick(env_step)
        with self.logger.evaluating(f"final evaluation ({config.final_eval_episodes} episodes)"):
            returns = evaluation.evaluate(self.agent.greedy, self.env_spec, config.final_eval_episodes,
                                          seed=self.seed + evaluation.FINAL_SEED_OFFSET,
                                          stop_requested=self.options.stop_requested)
        early = {} if self.stopped_by is None else {"stopped_early_by": self.stopped_by}
        final = self.logger.log("final_eval", env_step, {
            "return_mean": float(returns.mean()), "return_std": float(returns.std()), "episodes": len(returns),
            **self.agent.counters(), **early})
        if self.best is not None:
            fresh_policy = self.spec.policy_module.serving_policy(config, self.info)
            with self.logger.evaluating("evaluating the best policy"):
                final["best"] = best_policy.log_final_evaluation(
                    self.run_dir, fresh_policy, self.info.observations, self.env_spec, config.final_eval_episodes,
                    self.seed + evaluation.FINAL_SEED_OFFSET, self.logger, env_step, self.options.stop_requested)
        return final

    @contextlib.contextmanager
    def _untimed(self):
        """A block whose duration env_steps_per_s leaves out."""
        start = time.perf_counter()
        try:
            yield
        finally:
            since_time, since_step = self._rate_since
            self._rate_since = (since_time + time.perf_counter() - start, since_step)


def check_runtime(agent: agents.RegisteredAgent, config, runtime: Runtime) -> None:
    """UsageError if the agent cannot train `config` under `runtime` (its strategy); writes nothing."""
    agent.check_runtime(config, runtime)
    best_policy.check_runtime(config.keep_best_policy, runtime)
