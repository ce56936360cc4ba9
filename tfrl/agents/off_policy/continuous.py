"""The acting half every continuous-action, replay-based agent shares (SAC, TD3): act with a NumPy mirror of the
actor, store transitions, train every train_period_env_steps (tfrl.agents.off_policy.training: the replay, the
train deadline, K gradient steps per TF call, optionally in the background).

Actions are kept in [-1, 1]^D (what the actor's tanh gives, and what the replay and the critics see); the env
gets them rescaled to its Box. Before learning_starts env steps, actions are uniform in [-1, 1]^D (SB3 too).
Noise the learner's step needs (SAC's sampled actions, TD3's target smoothing) is drawn here, in NumPy, and goes
in with the batch, so a train call is a pure function of its inputs. With normalize_observations the replay keeps
raw observations; acting counts each one in the running statistics and each sampled batch is normalized with
the statistics of its train call (tfrl.models.normalization).

A subclass says how it explores (EXPLORER), what its greedy action is (`greedy_squashed`), which noise its
batches carry (NOISE_FIELDS) and how it builds its mirror and serving policy. Its share of a checkpoint: the
replay (arrays), the acting and noise RNGs, the train deadline, the log interval's metrics so far.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from tfrl.agents.core import rng_state, set_rng_state
from tfrl.agents.interval_means import IntervalMeans
from tfrl.agents.off_policy.training import ReplayTraining, check_first_batch, collect_transitions
from tfrl.envs import EnvInfo, VectorStepper
from tfrl.replay import UniformReplay

if TYPE_CHECKING:  # the type only: Ray loads with --actors
    from tfrl.agents.off_policy.ray_actors import RayTransitions


def to_env_action(squashed, low, high):
    """[-1, 1] -> the Box: low + (a + 1) / 2 * (high - low) (NumPy or TF)."""
    return low + (squashed + 1.0) * 0.5 * (high - low)


class ContinuousActing:
    """A continuous agent's side of a vector step: uniform actions in [-1, 1]^D before learning_starts, then the
    explorer's (explorer(mirror, config): explore(obs, rng) from the actor's mirror); the transitions with raw
    observations. In the learner's process, or in a rollout actor for its envs (tfrl.rollout_actors)."""

    def __init__(self, mirror, num_envs: int, seed: int, *, explorer, env: EnvInfo, config):
        del num_envs  # one transition per env and step: nothing kept per env
        self.explore = explorer(mirror, config)
        self.rng = np.random.default_rng(seed)
        self._size, self._action_shape = env.action_size, tuple(env.action_shape)
        self._low, self._high = (np.asarray(b, np.float32).reshape(self._size) for b in (env.action_low, env.action_high))
        self._learning_starts, self._gamma = config.learning_starts, config.gamma

    def use(self, mirror) -> None:
        self.explore.use(mirror)

    def env_action(self, squashed: np.ndarray) -> np.ndarray:
        actions = to_env_action(squashed, self._low, self._high)
        return actions.reshape(len(squashed), *self._action_shape)

    def step(self, env, env_step: int, obs_normalizer, observe=None):
        """One vector step of `env` (a VectorStepper): (s_t raw, a_t in [-1, 1]^D, r_t, gamma (1 - terminated),
        s_t+1 raw); obs_normalizer counts s_t and normalizes what the explorer sees."""
        del observe  # the replay keeps whole observations
        obs = obs_normalizer.observe(env.obs)
        if env_step < self._learning_starts:
            squashed = self.rng.uniform(-1.0, 1.0, (env.num_envs, self._size)).astype(np.float32)
        else:
            squashed = self.explore(obs, self.rng)
        step = env.step(self.env_action(squashed))
        discount = self._gamma * (1.0 - step.terminated.astype(np.float32))
        return step.obs, squashed, step.reward, discount.astype(np.float32), step.final_obs()


class ContinuousAgent:
    NAME = ""  # in messages
    EXPLORER: type = object  # EXPLORER(mirror, config): explore(obs, rng) -> [N, D] in [-1, 1]^D; use(mirror)
    NOISE_FIELDS: tuple[str, ...] = ()  # standard-normal [K, B, D] arrays each batch carries, drawn in this order

    def __init__(self, learner, config, env: EnvInfo, seed: int, mirror):
        self.learner, self.config, self._env_info = learner, config, env
        self._size = env.action_size
        self._mirror = mirror
        self.acting = self.acting_factory()(mirror, config.num_envs, seed)
        self._noise_rng = np.random.default_rng([seed, 1])  # the learner's noise
        self.training = ReplayTraining(learner, config, self._new_replay(config, env, seed), self._apply)
        self._metrics = IntervalMeans()
        self._obs_normalizer = learner.obs_normalizer

    @staticmethod
    def _new_replay(config, env: EnvInfo, seed: int):
        return UniformReplay(config.replay_capacity, env.observations.row_shape, seed, (env.action_size,), np.float32,
                             obs_dtype=env.observations.numpy_dtype)

    @property
    def replay(self):
        return self.training.replay

    @property
    def rng(self) -> np.random.Generator:
        """The acting RNG (its state is checkpointed)."""
        return self.acting.rng

    def acting_factory(self) -> Callable[[Any, int, int], ContinuousActing]:
        """(mirror, num_envs, seed) -> acting for that many envs: this agent's, or a rollout actor's (picklable)."""
        return functools.partial(ContinuousActing, explorer=self.EXPLORER, env=self._env_info, config=self.config)

    def greedy_squashed(self, obs: np.ndarray) -> np.ndarray:
        """The greedy actions in [-1, 1]^D [N, D] for normalized observations."""
        raise NotImplementedError

    def collect(self, env: VectorStepper | RayTransitions) -> None:
        """One vector step here, or one round of the rollout actors (--actors)."""
        collect_transitions(env, self.acting, self._mirror, self._obs_normalizer, self.replay)

    def train(self, env_step: int) -> None:
        if not self.training.due(env_step):
            return
        k, b = self.config.gradient_steps_per_train, self.config.batch_size
        transitions = self.training.sample()
        for name in ("obs", "next_obs"):  # the replay keeps raw observations
            transitions[name] = self._obs_normalizer(transitions[name])
        for name in self.NOISE_FIELDS:
            transitions[name] = self._noise_rng.standard_normal((k, b, self._size)).astype(np.float32)
        self.training.run(transitions)

    def _apply(self, update, context) -> None:
        del context
        self._mirror.update(update.weights)
        self._metrics.add(update.metrics)

    def settle(self) -> None:
        """Ends the train call in flight; the observation statistics go into the layer that checkpoints and the
        best policy save."""
        self.training.settle()
        self._obs_normalizer.sync()

    def close(self) -> None:
        self.training.close()

    def log_values(self) -> dict[str, float]:
        return self._metrics.take()

    def counters(self) -> dict[str, int]:
        return {"gradient_steps": int(self.learner.gradient_steps.numpy())}

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return self.acting.env_action(self.greedy_squashed(self._obs_normalizer(obs)))

    def checkpoint_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        self.settle()
        training_state, arrays = self.training.checkpoint_state()
        return {**training_state, "train_metrics": self._metrics.state(), "actor_rng": rng_state(self.rng),
                "noise_rng": rng_state(self._noise_rng)}, arrays

    def restore(self, state: Mapping, arrays: Mapping[str, np.ndarray]) -> None:
        self.training.restore(state, arrays)
        self._metrics.restore(state["train_metrics"])
        set_rng_state(self.rng, state["actor_rng"])
        set_rng_state(self._noise_rng, state["noise_rng"])
        self.reload_weights()

    def reload_weights(self) -> None:
        self._mirror.update([v.numpy() for v in self.learner.acting_variables()])
        self._obs_normalizer.load()

    @classmethod
    def check_runtime(cls, config, runtime) -> None:
        """With several workers every train call is a collective: the first must find a full batch everywhere."""
        check_first_batch(cls.NAME, config, runtime)
