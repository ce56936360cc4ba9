"""Advantages and value targets of a rollout, in NumPy (A2C, PPO).

One rollout: T = rollout_length vector steps of N = num_envs envs.
    d_t = 1 if the episode ended at step t (terminated or truncated), else 0
    delta_t = r_t + gamma * (1 - d_t) * V(s_{t+1}) - V(s_t)               # [N], V(s_T) = last_value
    A_t = delta_t + gamma * lambda * (1 - d_t) * A_{t+1}                 # GAE (Schulman et al. 2016), A_T = 0
    G_t = A_t + V(s_t)                                                   # value target
With lambda = 1, G_t = r_t + gamma r_{t+1} + ... + gamma^k V(s_{t+k}): the n-step
return of A2C (Mnih et al. 2016), cut at the episode end or the rollout end.

A time-limit truncation is not a terminal state (Pardo et al. 2018, "Time Limits
in RL"): the rollout adds gamma * V(final obs) to r_t and marks d_t = 1, so the
recursion bootstraps from the episode's true last state rather than from the next
episode's first one (SB3 does the same: DLR-RM/stable-baselines3 issue #633, PR #658).

A rollout acted by an older policy mu than the learner's pi (asynchronous rollout actors) gets V-trace's
corrected targets instead (Espeholt et al. 2018, IMPALA, eq. 1 and Remark 2), with V the learner's values:
    rho_t = min(rho_bar, pi(a_t|s_t) / mu(a_t|s_t)),  c_t = lambda * min(c_bar, pi / mu)
    v_t = V(s_t) + rho_t delta_t + gamma (1 - d_t) c_t (v_{t+1} - V(s_{t+1})),  v_T = V(s_T)
    A_t = rho_t (r_t + gamma (1 - d_t) v_{t+1} - V(s_t))                 # the policy gradient's advantage
With pi = mu, v_t is the GAE value target G_t above.
"""

from __future__ import annotations

import numpy as np


def n_step_advantages(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray,
                      gamma: float, gae_lambda: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and value targets of a rollout; gae_lambda = 1 gives n-step returns.

    rewards, values, dones: [T, N] (dones as 0/1 or bool: the episode ended at step t);
    last_value: V(s_T) [N], the value of the observation after the rollout.
    Returns (advantages [T, N], returns [T, N]) as float32, returns = advantages + values.
    """
    rewards = np.asarray(rewards, np.float32)
    values = np.asarray(values, np.float32)
    not_done = 1.0 - np.asarray(dones, np.float32)  # [T, N]
    advantages = np.empty_like(rewards)
    next_value = np.asarray(last_value, np.float32)  # V(s_{t+1}) [N]
    next_advantage = np.zeros_like(next_value)  # A_{t+1} [N]
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * not_done[t] * next_value - values[t]  # [N]
        next_advantage = delta + gamma * gae_lambda * not_done[t] * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages, advantages + values


def vtrace(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray,
           log_ratios: np.ndarray, gamma: float, gae_lambda: float, rho_bar: float = 1.0,
           c_bar: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """V-trace advantages and value targets (module docstring) of a rollout acted by mu, for the policy pi.

    rewards, values (V of pi's learner), dones, log_ratios (log pi(a_t|s_t) - log mu(a_t|s_t)): [T, N];
    last_value: V(s_T) [N]. Returns (advantages [T, N], value targets v_t [T, N]) as float32.
    """
    rewards = np.asarray(rewards, np.float32)
    values = np.asarray(values, np.float32)
    not_done = 1.0 - np.asarray(dones, np.float32)
    ratios = np.exp(np.asarray(log_ratios, np.float64))
    rhos = np.minimum(rho_bar, ratios).astype(np.float32)
    cs = (gae_lambda * np.minimum(c_bar, ratios)).astype(np.float32)
    targets = np.empty_like(rewards)
    next_value = np.asarray(last_value, np.float32)  # V(s_{t+1})
    next_correction = np.zeros_like(next_value)  # v_{t+1} - V(s_{t+1})
    for t in reversed(range(rewards.shape[0])):
        delta = rhos[t] * (rewards[t] + gamma * not_done[t] * next_value - values[t])
        next_correction = delta + gamma * not_done[t] * cs[t] * next_correction
        targets[t] = values[t] + next_correction
        next_value = values[t]
    next_targets = np.concatenate([targets[1:], np.asarray(last_value, np.float32)[None]])  # v_{t+1}
    advantages = rhos * (rewards + gamma * not_done * next_targets - values)
    return advantages.astype(np.float32), targets


def bootstrap_truncated(rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                        final_values: np.ndarray, gamma: float) -> np.ndarray:
    """r + gamma * V(final obs) where the episode was truncated (time limit) but not terminated; [N] each.

    An env can report both flags at once (the terminal state falls on the time limit): then it terminated,
    and there is nothing to bootstrap from.
    """
    bootstrap = np.asarray(truncated, bool) & ~np.asarray(terminated, bool)
    return np.where(bootstrap, rewards + gamma * final_values, rewards).astype(np.float32)


def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
    """1 - Var(G - V) / Var(G): 1 = V predicts the targets exactly, 0 = no better than a constant."""
    var_returns = np.var(returns)
    return float("nan") if var_returns == 0 else float(1.0 - np.var(returns - values) / var_returns)
