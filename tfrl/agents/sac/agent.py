"""The SAC agent: act with the squashed Gaussian of a NumPy mirror of the actor, store transitions, and train
every train_period_env_steps (as DQN: the replay, the train deadline, K gradient steps per TF call, optionally in
the background).

Actions are kept in [-1, 1]^D (what the actor's tanh gives, and what the replay and the critics see); the env
gets them rescaled to its Box. Before learning_starts env steps, actions are uniform in [-1, 1]^D (SB3 too).
The noise of the actions the learner samples (at s and at s') is drawn here, in NumPy, and goes in with the batch.
With normalize_observations the replay keeps raw observations; acting counts each one in the running statistics
and each sampled batch is normalized with the statistics of its train call (tfrl.normalization).

Its share of a checkpoint: the replay (arrays), the acting and noise RNGs, the train deadline, the last metrics.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from tfrl import checkpoints, distribute, normalization
from tfrl.agents.off_policy import TrainCalls
from tfrl.agents.sac import policy as sac_policy
from tfrl.agents.sac.config import SACConfig
from tfrl.agents.sac.learning import LOG_STD_MAX, LOG_STD_MIN, SACBatch, SACLearner
from tfrl.deadlines import next_deadline
from tfrl.envs import EnvInfo, VectorStepper
from tfrl.replay import UniformReplay


class NumpySquashedActor:
    """The actor's forward pass in NumPy: obs [N, ...] -> (mean [N, D], log std [N, D], clipped)."""

    def __init__(self, actor):
        self._paths = [v.path.split("/", 1)[-1] if v.path.startswith(actor.name + "/") else v.path
                       for v in actor.trainable_variables]
        self._torso = sorted({p.split("/")[0] for p in self._paths if p.startswith("torso_")},
                             key=lambda name: int(name.split("_")[1]))
        self.update([v.numpy() for v in actor.trainable_variables])

    def update(self, values) -> None:
        w = {p: np.asarray(v, np.float32) for p, v in zip(self._paths, values)}
        self._layers = [(w[f"{n}/kernel"], w[f"{n}/bias"]) for n in self._torso]
        self._mean = (w["mean_head/kernel"], w["mean_head/bias"])
        self._log_std = (w["log_std_head/kernel"], w["log_std_head/bias"])

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = obs.reshape(len(obs), -1)
        for kernel, bias in self._layers:
            x = np.maximum(x @ kernel + bias, 0.0)
        log_std = np.clip(x @ self._log_std[0] + self._log_std[1], LOG_STD_MIN, LOG_STD_MAX)
        return x @ self._mean[0] + self._mean[1], log_std


class SACAgent:
    def __init__(self, learner: SACLearner, config: SACConfig, env: EnvInfo, seed: int):
        self.learner, self.config, self._env_info = learner, config, env
        self._size = env.action_size
        self._low, self._high = (np.asarray(b, np.float32).reshape(self._size) for b in (env.action_low, env.action_high))
        self._mirror = NumpySquashedActor(learner.actor)
        self.rng = np.random.default_rng(seed)  # acting
        self._noise_rng = np.random.default_rng([seed, 1])  # the learner's action noise
        self.replay = UniformReplay(config.replay_capacity, env.obs_shape, seed, (self._size,), np.float32)
        self._train_at = max(config.learning_starts, config.train_period_env_steps)
        self._metrics: dict[str, float] = {}
        self._calls = TrainCalls(learner, self._apply, background=config.train_in_background)
        self._obs_normalizer = normalization.observation_normalizer(learner.obs_normalization)

    def collect(self, env: VectorStepper) -> None:
        obs = self._obs_normalizer.observe(env.obs)
        if env.env_step < self.config.learning_starts:
            squashed = self.rng.uniform(-1.0, 1.0, (env.num_envs, self._size)).astype(np.float32)
        else:
            mean, log_std = self._mirror(obs)
            squashed = np.tanh(mean + np.exp(log_std) * self.rng.standard_normal(mean.shape)).astype(np.float32)
        step = env.step(self._env_action(squashed))
        discount = self.config.gamma * (1.0 - step.terminated.astype(np.float32))
        self.replay.add(step.obs, squashed, step.reward, discount.astype(np.float32), step.final_obs())

    def train(self, env_step: int) -> None:
        config = self.config
        if env_step < self._train_at or self.replay.size < config.batch_size:
            return
        self._train_at = next_deadline(self._train_at, env_step, config.train_period_env_steps)
        self._calls.settle()
        k, b = config.gradient_steps_per_train, config.batch_size
        transitions = self.replay.sample(b, k)
        for name in ("obs", "next_obs"):  # the replay keeps raw observations
            transitions[name] = self._obs_normalizer(transitions[name])
        for name in ("noise_next", "noise"):
            transitions[name] = self._noise_rng.standard_normal((k, b, self._size)).astype(np.float32)
        self._calls.run(SACBatch(transitions))

    def _apply(self, update, context) -> None:
        del context
        self._mirror.update(update.weights)
        self._metrics = update.metrics

    def settle(self) -> None:
        """Ends the train call in flight; the observation statistics go into the layer that checkpoints and the
        best policy save."""
        self._calls.settle()
        self._obs_normalizer.sync()

    def _env_action(self, squashed: np.ndarray) -> np.ndarray:
        actions = sac_policy.to_env_action(squashed, self._low, self._high)
        return actions.reshape(len(squashed), *self._env_info.action_shape)

    def log_values(self) -> dict[str, float]:
        return dict(self._metrics)

    def counters(self) -> dict[str, int]:
        return {"gradient_steps": int(self.learner.gradient_steps_done.numpy())}

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return self._env_action(np.tanh(self._mirror(self._obs_normalizer(obs))[0]))

    def serving_policy(self):
        return sac_policy.serving_policy(self.config, self._env_info, self.learner.actor,
                                         self.learner.obs_normalization)

    def checkpoint_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        self.settle()
        replay_arrays, replay_state = self.replay.checkpoint_state()
        return {"next_train_at": self._train_at, "train_metrics": self._metrics, "replay": replay_state,
                "actor_rng": checkpoints.rng_state(self.rng),
                "noise_rng": checkpoints.rng_state(self._noise_rng)}, replay_arrays

    def restore(self, state: Mapping, arrays: Mapping[str, np.ndarray]) -> None:
        self._train_at = state["next_train_at"]
        self._metrics = dict(state["train_metrics"])
        checkpoints.set_rng_state(self.rng, state["actor_rng"])
        checkpoints.set_rng_state(self._noise_rng, state["noise_rng"])
        self.replay.restore_checkpoint_state(arrays, state["replay"])
        self.reload_weights()

    def reload_weights(self) -> None:
        self._mirror.update([v.numpy() for v in self.learner.actor.trainable_variables])
        self._obs_normalizer.load()

    def close(self) -> None:
        self._calls.close()

    @staticmethod
    def check_runtime(config: SACConfig, runtime) -> None:
        """With several workers every train call is a collective: the first must find a full batch everywhere."""
        if runtime.cluster.num_workers == 1:
            return
        first_train_at = max(config.learning_starts, config.train_period_env_steps)
        if -(-first_train_at // config.num_envs) * config.num_envs < config.batch_size:
            raise distribute.DistributeConfigError(
                f"multi_worker SAC: at the first train call (env step {first_train_at}) a worker's replay may hold "
                f"fewer than batch_size={config.batch_size} transitions; raise learning_starts to at least "
                f"{config.batch_size}")
