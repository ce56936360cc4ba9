"""An on-policy rollout: collected on the vector env, stored as [T, N] arrays, handed to the learner flattened."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, NamedTuple, Sequence

import numpy as np

from tfrl.agents.actor_critic import advantages as advantages_lib
from tfrl.envs import VectorStep

if TYPE_CHECKING:  # the type only: storing a rollout needs no Keras
    from tfrl.models.running_stats import RewardScaler

# The [T, N, ...] arrays record() fills from the steps, before finish() (a rollout worker sends these back).
STEP_FIELDS = ("obs", "actions", "values", "policy_params", "env_rewards", "terminated", "truncated",
               "final_values", "dones")
MEMORY_FIELDS = ("states", "starts")  # and these, with memory


class Rollout(NamedTuple):
    """One update's data, flattened over (time, env) to B = rollout_length * num_envs rows."""

    obs: np.ndarray  # s_t [B, *obs_shape] float32 (uint8 images)
    actions: np.ndarray  # a_t [B] int32 (Discrete) or [B, D] float32 (Box: the unclipped sample)
    advantages: np.ndarray  # A_t [B] float32 (GAE)
    returns: np.ndarray  # G_t = A_t + V(s_t) [B] float32, the value targets
    log_probs: np.ndarray  # log pi_old(a_t | s_t) [B] float32, of the policy that acted
    start_env_step: int  # env step where the rollout began: the clock of every schedule
    states: np.ndarray | None = None  # with memory: the state the actor stepped from at s_t [B, S] float32
    starts: np.ndarray | None = None  # with memory: 1.0 where an episode started at s_t (its state zeroed) [B]

    def rows(self) -> dict[str, np.ndarray]:
        """The per-row fields by the names the learners' row layouts use."""
        rows = {"obs": self.obs, "action": self.actions, "advantage": self.advantages, "return": self.returns,
                "log_prob": self.log_probs}
        if self.states is not None:
            rows.update(state=self.states, start=self.starts)
        return rows


class RolloutStorage:
    """The [T, N] arrays one rollout fills, reused from rollout to rollout: what the steps gave (record), then
    the learner's rewards, advantages and value targets (finish)."""

    def __init__(self, rollout_length: int, num_envs: int, obs_shape: Sequence[int], head,
                 obs_dtype: str = "float32", state_size: int = 0):
        t, n = rollout_length, num_envs
        self.rollout_length = rollout_length
        self.obs = np.zeros((t, n, *obs_shape), obs_dtype)  # s_t
        self.actions = np.zeros((t, n, *head.stored_shape), head.action_dtype)  # a_t
        num_policy_params = head.num_params
        self.env_rewards = np.zeros((t, n), np.float64)  # r_t as the env gave it (its dtype: see record)
        self.terminated = np.zeros((t, n), bool)
        self.truncated = np.zeros((t, n), bool)
        self.final_values = np.zeros((t, n), np.float32)  # V(final obs) where truncated at t, else 0
        self.rewards = np.zeros((t, n), np.float32)  # the learner's r_t: scaled, + gamma V(final obs) if truncated
        self.dones = np.zeros((t, n), np.float32)  # 1 if the episode ended at t
        self.values = np.zeros((t, n), np.float32)  # V(s_t)
        self.policy_params = np.zeros((t, n, num_policy_params), np.float32)  # what a_t was sampled from
        self.returns = np.zeros((t, n), np.float32)  # G_t of the last finished rollout
        # With memory: the state the actor stepped from at s_t, and 1.0 where an episode started at s_t.
        self.states = np.zeros((t, n, state_size), np.float32) if state_size else None
        self.starts = np.zeros((t, n), np.float32) if state_size else None
        # (columns, the envs they hold) in the order the reward scaler takes them: asynchronous rollout actors
        # fill the columns with shares in the order they arrive (set_shares).
        self.shares = [(slice(None), slice(None))]
        self.target: tuple[np.ndarray, np.ndarray] | None = None  # see set_target

    def record(self, t: int, step: VectorStep, obs: np.ndarray, action: np.ndarray, value: np.ndarray,
               policy_params: np.ndarray, final_values: np.ndarray | None,
               memory: tuple[np.ndarray, np.ndarray] | None) -> None:
        """Step t: the env step (its raw rewards and flags), s_t as the learner sees it (normalized, when the agent
        normalizes), a_t as sampled (not as the env got it, clipped), V(s_t), the policy params a_t was sampled
        from, V(final obs) [N] if an episode was truncated (else None) and, with memory, (the state the actor
        stepped from, its episode-start flags)."""
        if memory is not None:
            self.states[t], self.starts[t] = memory
        self._keep_env_reward_dtype(step.reward.dtype)
        self.obs[t] = obs
        self.actions[t] = action
        self.values[t] = value
        self.policy_params[t] = policy_params
        self.env_rewards[t] = step.reward
        self.terminated[t], self.truncated[t] = step.terminated, step.truncated
        self.final_values[t] = 0.0 if final_values is None else final_values
        self.dones[t] = step.done

    def step_fields(self) -> tuple[str, ...]:
        """The names of the [T, N, ...] arrays record() fills."""
        return STEP_FIELDS + (MEMORY_FIELDS if self.states is not None else ())

    def write_share(self, envs: slice, fields: Mapping[str, np.ndarray]) -> None:
        """The step_fields() [T, n, ...] of the envs `envs`, as another storage of n envs recorded them."""
        self._keep_env_reward_dtype(fields["env_rewards"].dtype)
        for name in self.step_fields():
            getattr(self, name)[:, envs] = fields[name]

    def set_shares(self, shares: Sequence[tuple[slice, slice]]) -> None:
        """The columns written by write_share, each with the envs its steps came from, in the order they were
        stepped (an env's steps must reach the reward scaler in time order)."""
        self.shares = list(shares)

    def set_target(self, policy_params: np.ndarray, values: np.ndarray) -> None:
        """The learner's policy params [T, N, P] and values [T, N] at s_t, when an older policy acted (asynchronous
        rollout actors): finish() then gives V-trace's targets for it and log pi(a|s) of it."""
        self.target = (policy_params, values)

    def _keep_env_reward_dtype(self, dtype) -> None:
        """The env's reward dtype for env_rewards: the reward scaler's arithmetic runs in it."""
        if self.env_rewards.dtype != dtype:
            self.env_rewards = np.zeros(self.env_rewards.shape, dtype)

    def finish(self, last_value: np.ndarray, gamma: float, gae_lambda: float, head, start_env_step: int,
               reward_scaler: RewardScaler | None = None) -> Rollout:
        """The flattened Rollout, given V(s_T) [N], the value of the observation after the last step (the
        learner's, with set_target). The rewards pass the scaler (if any) in time order, then a time-limit
        truncation bootstraps from V(the episode's last obs) (tfrl.agents.actor_critic.advantages)."""
        self._learner_rewards(reward_scaler, gamma)
        rows = self.actions.shape[0] * self.actions.shape[1]
        actions = self.actions.reshape(rows, *self.actions.shape[2:])
        # log pi_old(a|s) of the acting policy, once per rollout: one NumPy call, not one per vector step.
        log_probs = head.log_prob_numpy(self.policy_params.reshape(rows, -1), actions)
        if self.target is None:
            advantages, self.returns = advantages_lib.n_step_advantages(self.rewards, self.values, self.dones,
                                                                        last_value, gamma, gae_lambda)  # [T, N]
        else:  # an older policy acted: pi_old is the learner's policy now, corrected for with V-trace
            behaviour_log_probs, log_probs = log_probs, head.log_prob_numpy(self.target[0].reshape(rows, -1), actions)
            log_ratios = (log_probs - behaviour_log_probs).reshape(self.rewards.shape)
            advantages, self.returns = advantages_lib.vtrace(self.rewards, self.target[1], self.dones, last_value,
                                                             log_ratios, gamma, gae_lambda)
        memory = {} if self.states is None else {"states": self.states.reshape(rows, -1),
                                                 "starts": self.starts.reshape(-1)}
        return Rollout(self.obs.reshape(len(actions), *self.obs.shape[2:]), actions, advantages.reshape(-1),
                       self.returns.reshape(-1), log_probs, start_env_step, **memory)

    def _learner_rewards(self, reward_scaler: RewardScaler | None, gamma: float) -> None:
        for columns, envs in self.shares:
            for t in range(self.rollout_length):
                terminated, truncated = self.terminated[t, columns], self.truncated[t, columns]
                reward = self.env_rewards[t, columns]
                if reward_scaler is not None:
                    reward = reward_scaler.scale(reward, terminated | truncated, envs)
                if truncated.any():
                    reward = advantages_lib.bootstrap_truncated(reward, terminated, truncated,
                                                                self.final_values[t, columns], gamma)
                self.rewards[t, columns] = reward

    def explained_variance(self) -> float:
        """Of V(s_t) (the learner's, where an older policy acted) for the last rollout's value targets."""
        values = self.values if self.target is None else self.target[1]
        return advantages_lib.explained_variance(values, self.returns)
