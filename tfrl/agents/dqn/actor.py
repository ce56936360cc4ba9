"""DQN acting: epsilon-greedy over a NumPy mirror of the online network, among the legal actions where the env
masks them (tfrl.envs.observations). Never exported."""

from __future__ import annotations

import numpy as np

from tfrl.agents.dqn.config import DQNConfig
from tfrl.envs.observations import legal_actions
from tfrl.replay import NStepBuilder
from tfrl.schedules import Schedule


def epsilon_schedule(config: DQNConfig) -> Schedule:
    """Epsilon falls linearly from epsilon_start to epsilon_end over the first
    epsilon_decay_fraction * total_env_steps env steps, then stays at epsilon_end."""
    return Schedule(config.epsilon_start, config.epsilon_end, config.epsilon_decay_fraction * config.total_env_steps)


class EpsilonGreedyActor:
    def __init__(self, q_values_fn, num_actions: int, seed: int):
        self._q_values = q_values_fn  # obs [N, ...] -> [N, A]
        self._num_actions = num_actions
        self._rng = np.random.default_rng(seed)

    @property
    def rng(self) -> np.random.Generator:
        """The exploration RNG; its state is checkpointed."""
        return self._rng

    def use(self, q_values_fn) -> None:
        """Acts on `q_values_fn` from now on (a copy of newer weights, as a rollout actor receives them)."""
        self._q_values = q_values_fn

    def act(self, obs: np.ndarray, epsilon: float) -> np.ndarray:
        return self.choose(self._q_values(obs), obs, epsilon)

    def choose(self, q_values: np.ndarray, obs: np.ndarray, epsilon: float) -> np.ndarray:
        """Epsilon-greedy actions [N] given the Q-values [N, A] of obs (whose action mask, if any, they obey)."""
        legal = legal_actions(obs)
        greedy = masked_argmax(q_values, legal)
        explore = self._rng.random(len(obs)) < epsilon
        if not explore.any():
            return greedy
        if legal is None:
            random_actions = self._rng.integers(0, self._num_actions, size=len(obs))
        else:  # uniform among the legal actions: the largest of a uniform draw per legal action
            random_actions = np.argmax(np.where(legal, self._rng.random(legal.shape), -1.0), axis=-1)
        return np.where(explore, random_actions, greedy)

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return masked_argmax(self._q_values(obs), legal_actions(obs))


def masked_argmax(values: np.ndarray, legal: np.ndarray | None) -> np.ndarray:
    """argmax over the last axis [N, A] -> [N], among the legal actions (legal: bool [N, A], None: all)."""
    return np.argmax(values if legal is None else np.where(legal, values, -np.inf), axis=-1)


class DQNActing:
    """DQN's side of a vector step: epsilon-greedy actions (epsilon of the run's env step), then the n-step
    transitions of each env. In the learner's process, or in a rollout actor for its envs (tfrl.rollout_actors)."""

    def __init__(self, q_values_fn, num_envs: int, seed: int, *, config: DQNConfig, num_actions: int):
        self.actor = EpsilonGreedyActor(q_values_fn, num_actions, seed=seed)
        self._epsilon = epsilon_schedule(config)  # built once: step() runs at every env step
        self._nstep = NStepBuilder(config.n_step_return, config.gamma, num_envs)

    @property
    def rng(self) -> np.random.Generator:
        return self.actor.rng

    def use(self, q_values_fn) -> None:
        self.actor.use(q_values_fn)

    def step(self, env, env_step: int, obs_normalizer=None, observe=None):
        """One vector step of `env` (a VectorStepper); the complete transitions, or None. observe(step): (s_t,
        s_t+1) as the replay stores them (default: whole observations). DQN normalizes no observations."""
        del obs_normalizer
        step = env.step(self.actor.act(env.obs, self._epsilon.at(env_step)))
        obs, final_obs = (step.obs, step.final_obs()) if observe is None else observe(step)
        return self._nstep.step(obs, step.action, step.reward, step.terminated, step.truncated, final_obs)
