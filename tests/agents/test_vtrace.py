"""V-trace (tfrl.agents.actor_critic.advantages.vtrace), which corrects rollouts acted by an older policy
(--actor_mode=async): values computed by hand, the acting policy's case is GAE, and RolloutStorage.finish with a
target policy hands the learner V-trace's targets and the target's log pi(a|s); the reward scaler takes shares
of the envs in the order they were stepped."""

import numpy as np
import pytest

from tfrl.agents.actor_critic.advantages import n_step_advantages, vtrace
from tfrl.agents.actor_critic.heads import CategoricalHead
from tfrl.agents.actor_critic.rollout import RolloutStorage
from tfrl.models.running_stats import RewardScaler

REWARDS, VALUES, LAST_VALUE = [[1.0], [2.0], [3.0]], [[0.5], [1.0], [1.5]], [2.0]
LOG_RATIOS = np.log([[2.0], [0.5], [1.0]])  # rho = c = [1 (clipped), 0.5, 1]


def test_vtrace_by_hand():
    # t=2: delta = 3 + 0.9*2 - 1.5 = 3.3, v2 = 4.8
    # t=1: delta = 0.5 (2 + 0.9*1.5 - 1) = 1.175, v1 - V1 = 1.175 + 0.9*0.5*3.3 = 2.66, v1 = 3.66
    # t=0: delta = 1 + 0.9*1 - 0.5 = 1.4, v0 - V0 = 1.4 + 0.9*1*2.66 = 3.794, v0 = 4.294
    # A_t = rho_t (r_t + 0.9 v_{t+1} - V_t): 1 + 0.9*3.66 - 0.5 = 3.794; 0.5 (2 + 0.9*4.8 - 1) = 2.66; 3.3
    advantages, targets = vtrace(REWARDS, VALUES, [[0], [0], [0]], LAST_VALUE, LOG_RATIOS, 0.9, 1.0)
    np.testing.assert_allclose(targets[:, 0], [4.294, 3.66, 4.8], rtol=1e-6)
    np.testing.assert_allclose(advantages[:, 0], [3.794, 2.66, 3.3], rtol=1e-6)
    assert advantages.dtype == targets.dtype == np.float32


def test_vtrace_stops_at_an_episode_end_by_hand():
    # The episode ends at t=1: v1 = V1 + 0.5 (2 - 1) = 1.5; v0 = 0.5 + 1.4 + 0.9*0.5 = 2.35; t=2 as before.
    advantages, targets = vtrace(REWARDS, VALUES, [[0], [1], [0]], LAST_VALUE, LOG_RATIOS, 0.9, 1.0)
    np.testing.assert_allclose(targets[:, 0], [2.35, 1.5, 4.8], rtol=1e-6)
    np.testing.assert_allclose(advantages[:, 0], [1 + 0.9 * 1.5 - 0.5, 0.5, 3.3], rtol=1e-6)


def test_vtrace_of_the_acting_policy_is_gae():
    rng = np.random.default_rng(0)
    rewards, values = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    dones, last_value = rng.random((6, 3)) < 0.3, rng.normal(size=3)
    advantages, targets = vtrace(rewards, values, dones, last_value, np.zeros((6, 3)), 0.99, 0.95)
    gae, gae_targets = n_step_advantages(rewards, values, dones, last_value, 0.99, 0.95)
    np.testing.assert_allclose(targets, gae_targets, rtol=1e-5, atol=1e-6)
    next_targets = np.concatenate([targets[1:], last_value[None].astype(np.float32)])
    np.testing.assert_allclose(advantages, rewards + 0.99 * (1 - dones) * next_targets - values, rtol=1e-5, atol=1e-5)
    assert not np.allclose(advantages, gae)  # IMPALA's advantage is not GAE's


def _storage(head):
    storage = RolloutStorage(3, 1, (2,), head)
    storage.env_rewards[:, 0] = [1.0, 2.0, 3.0]
    storage.dones[:] = 0.0
    storage.actions[:, 0] = [0, 1, 0]
    storage.policy_params[:] = 0.0  # the acting policy: uniform over 2 actions
    return storage


def test_a_rollout_with_a_target_policy_gets_vtrace_targets_and_the_targets_log_probs():
    head = CategoricalHead(2)
    storage = _storage(head)
    target_logits = np.array([[[np.log(4.0), 0.0]], [[np.log(4.0), 0.0]], [[0.0, 0.0]]], np.float32)  # pi(0) = 0.8
    storage.set_target(target_logits, np.array(VALUES, np.float32))
    rollout = storage.finish(np.array(LAST_VALUE, np.float32), 0.9, 1.0, head, start_env_step=0)
    # pi(a_t) = 0.8, 0.2, 0.5 against mu = 0.5: ratios 1.6 (clipped to 1), 0.4, 1
    np.testing.assert_allclose(rollout.log_probs, np.log([0.8, 0.2, 0.5]), rtol=1e-6)
    advantages, targets = vtrace(REWARDS, VALUES, [[0], [0], [0]], LAST_VALUE, np.log([[1.6], [0.4], [1.0]]), 0.9, 1.0)
    np.testing.assert_allclose(rollout.returns, targets[:, 0], rtol=1e-6)
    np.testing.assert_allclose(rollout.advantages, advantages[:, 0], rtol=1e-6)
    assert rollout.advantages[1] == pytest.approx(0.4 * (2 + 0.9 * rollout.returns[2] - 1.0), rel=1e-6)


def test_the_reward_scaler_takes_each_share_with_its_own_envs_returns():
    scaler = RewardScaler(4, gamma=0.5, clip=10.0)
    scaler.scale(np.array([1.0, 1.0]), np.array([False, True]), envs=slice(2, 4))
    np.testing.assert_array_equal(scaler.returns, [0.0, 0.0, 1.0, 0.0])  # env 3's episode ended
    scaler.scale(np.array([2.0, 2.0]), np.array([False, False]), envs=slice(2, 4))
    np.testing.assert_array_equal(scaler.returns, [0.0, 0.0, 2.5, 2.0])  # G = 0.5 G + r, per env
    assert scaler.stats.count == pytest.approx(4 + 1e-4, abs=1e-3)  # each env's G counted once per step
