"""Tests for the A2C learner math, the train step, the policy head and the NumPy mirror.

Expected numbers are worked out by hand in the comments. The train-step tests
build learners on CPU:0 without tfrl.hardware.runtime.apply(), so they leave the
process's TF configuration alone (the mixed precision test restores the Keras policy).
"""

import dataclasses
import math
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfrl import config as config_lib, presets
from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.a2c.learning import A2CLearner, a2c_loss
from tfrl.agents.actor_critic.advantages import bootstrap_truncated, explained_variance, n_step_advantages
from tfrl.agents.actor_critic.heads import CategoricalHead
from tfrl.agents.actor_critic.learning import learning_rate_at, normalized
from tfrl.agents.actor_critic.rollout import Rollout
from tfrl.envs import EnvInfo
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import numerics, numpy_networks

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
LN3 = math.log(3.0)


def _runtime(**options) -> Runtime:
    return Runtime(options=RuntimeOptions(**options), device_name="/device:CPU:0")


def _train(learner, obs, actions, advantages, returns, learning_rate):
    """(metrics, weights) of one update on these rows, at this constant step size (set through the config the
    learner reads it from at each update)."""
    learner.config = dataclasses.replace(learner.config, learning_rate=learning_rate, lr_schedule="constant")
    update = learner.update(Rollout(obs, actions, advantages, returns, np.zeros(len(obs), np.float32), 0))
    return update.metrics, update.weights


# --- advantages and returns: a rollout of T=3 steps on N=2 envs, gamma = 0.9 -------
#
# env 0: no episode end.      r = [1, 2, 3],   V(s_t) = [0.5, 1.0, 1.5], V(s_3) = 2
# env 1: terminated at t=0; truncated (time limit) at t=2 with V(final obs) = 4, which the
#        rollout folds into the reward: r_2 = 1 + 0.9 * 4 = 4.6 (see test_bootstrap_truncated...).
#                             r = [1, 1, 4.6], V(s_t) = [3, 2, 1],       V(s_3) = 10 (the next
#        episode's first obs: must not leak into the truncated one)
GAMMA = 0.9
REWARDS = np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 4.6]], np.float32)  # [T, N]
VALUES = np.array([[0.5, 3.0], [1.0, 2.0], [1.5, 1.0]], np.float32)  # [T, N]
DONES = np.array([[0, 1], [0, 0], [0, 1]], np.float32)  # [T, N]
LAST_VALUE = np.array([2.0, 10.0], np.float32)  # [N]


def test_n_step_returns_by_hand():
    advantages, returns = n_step_advantages(REWARDS, VALUES, DONES, LAST_VALUE, GAMMA, gae_lambda=1.0)
    # env 0: G_2 = r_2 + 0.9 * V(s_3) = 3 + 0.9*2 = 4.8
    #        G_1 = r_1 + 0.9 * G_2 = 2 + 0.9*4.8 = 6.32
    #        G_0 = r_0 + 0.9 * G_1 = 1 + 0.9*6.32 = 6.688
    # env 1: G_2 = 4.6 (episode ended at t=2: no bootstrap from V(s_3) = 10; the truncation's is in r_2)
    #        G_1 = 1 + 0.9*4.6 = 5.14
    #        G_0 = 1 (terminated at t=0)
    np.testing.assert_allclose(returns, [[6.688, 1.0], [6.32, 5.14], [4.8, 4.6]], rtol=1e-6)
    # A_t = G_t - V(s_t)
    np.testing.assert_allclose(advantages, [[6.188, -2.0], [5.32, 3.14], [3.3, 3.6]], rtol=1e-6)
    assert advantages.dtype == returns.dtype == np.float32


def test_gae_advantages_by_hand():
    advantages, returns = n_step_advantages(REWARDS, VALUES, DONES, LAST_VALUE, GAMMA, gae_lambda=0.5)
    # delta_t = r_t + 0.9 * (1 - d_t) * V(s_{t+1}) - V(s_t);  A_t = delta_t + 0.9*0.5 * (1 - d_t) * A_{t+1}
    # env 0: delta_2 = 3 + 0.9*2 - 1.5 = 3.3        A_2 = 3.3
    #        delta_1 = 2 + 0.9*1.5 - 1.0 = 2.35     A_1 = 2.35 + 0.45*3.3 = 3.835
    #        delta_0 = 1 + 0.9*1.0 - 0.5 = 1.4      A_0 = 1.4 + 0.45*3.835 = 3.12575
    # env 1: delta_2 = 4.6 - 1 = 3.6 (done)         A_2 = 3.6
    #        delta_1 = 1 + 0.9*1 - 2 = -0.1         A_1 = -0.1 + 0.45*3.6 = 1.52
    #        delta_0 = 1 - 3 = -2 (done)            A_0 = -2 (done: A_1 does not flow back)
    np.testing.assert_allclose(advantages, [[3.12575, -2.0], [3.835, 1.52], [3.3, 3.6]], rtol=1e-6)
    # G_t = A_t + V(s_t)
    np.testing.assert_allclose(returns, [[3.62575, 1.0], [4.835, 3.52], [4.8, 4.6]], rtol=1e-6)


def test_gae_lambda_zero_is_one_step_td_error():
    advantages, _ = n_step_advantages(REWARDS, VALUES, DONES, LAST_VALUE, GAMMA, gae_lambda=0.0)
    # A_t = delta_t (the deltas worked out in test_gae_advantages_by_hand)
    np.testing.assert_allclose(advantages, [[1.4, -2.0], [2.35, -0.1], [3.3, 3.6]], rtol=1e-6)


def test_bootstrap_truncated_adds_discounted_final_value_only_for_truncation():
    rewards = np.array([1.0, 1.0, 1.0, 1.0])
    terminated = np.array([False, True, False, True])
    truncated = np.array([False, False, True, True])  # env 3: terminal state on the time limit
    final_values = np.array([7.0, 7.0, 4.0, 7.0])
    # env 2: 1 + 0.9 * 4 = 4.6; the others keep r = 1
    np.testing.assert_allclose(bootstrap_truncated(rewards, terminated, truncated, final_values, GAMMA),
                               [1.0, 1.0, 4.6, 1.0], rtol=1e-6)


def test_explained_variance():
    returns = np.array([1.0, 2.0, 3.0])
    assert explained_variance(returns, returns) == 1.0
    assert explained_variance(np.full(3, 2.0), returns) == pytest.approx(0.0)  # the mean: Var(G - V) = Var(G)
    assert math.isnan(explained_variance(returns, np.ones(3)))


# --- categorical head ---------------------------------------------------------------

def test_entropy_of_uniform_categorical_is_log_num_actions():
    head = CategoricalHead(5)
    np.testing.assert_allclose(head.entropy(tf.zeros([3, 5])), np.full(3, math.log(5)), rtol=1e-6)
    # Equal large logits: still uniform, and no overflow in the softmax.
    np.testing.assert_allclose(head.entropy(tf.fill([1, 5], 1e4)), [math.log(5)], rtol=1e-6)


def test_log_prob_picks_the_action():
    head = CategoricalHead(2)
    logits = tf.constant([[LN3, 0.0], [LN3, 0.0]])  # pi = [3/4, 1/4]
    np.testing.assert_allclose(head.log_prob(logits, tf.constant([0, 1])), np.log([0.75, 0.25]), rtol=1e-6)


def test_sample_follows_softmax_and_mode_is_argmax():
    head = CategoricalHead(3)
    logits = np.log(np.array([[1.0, 2.0, 3.0]] * 30_000, np.float32))  # pi = [1/6, 2/6, 3/6]
    actions = head.sample(np.random.default_rng(0), logits)
    assert actions.dtype == np.int32 and actions.shape == (30_000,)
    # Standard error of each frequency <= sqrt(0.25 / 30000) ~ 0.003.
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / 30_000, [1 / 6, 2 / 6, 3 / 6], atol=0.012)
    np.testing.assert_array_equal(head.mode(np.array([[0.0, 2.0, 1.0], [5.0, 0.0, 1.0]])), [1, 0])


# --- loss ---------------------------------------------------------------------------

def test_a2c_loss_terms_by_hand():
    head = CategoricalHead(2)
    logits = tf.constant([[0.0, 0.0], [LN3, 0.0]])  # pi(.|s0) = [1/2, 1/2], pi(.|s1) = [3/4, 1/4]
    actions = tf.constant([0, 1])
    advantages = tf.constant([2.0, 1.0])
    values = tf.constant([1.0, 0.5])
    returns = tf.constant([2.0, -0.5])
    loss, terms = a2c_loss(head, logits, values, actions, advantages, returns, value_coef=0.5, entropy_coef=0.01)
    # log pi(a|s) = [ln 1/2, ln 1/4]
    # policy_loss = -mean([2 ln(1/2), 1 ln(1/4)]) = -(-2 ln 2 - 2 ln 2) / 2 = 2 ln 2 = 1.3862944
    assert float(terms["policy_loss"]) == pytest.approx(2 * math.log(2), rel=1e-6)
    # value_loss = mean([(2 - 1)^2, (-0.5 - 0.5)^2]) = 1
    assert float(terms["value_loss"]) == pytest.approx(1.0, rel=1e-6)
    # H = [ln 2, -(3/4 ln 3/4 + 1/4 ln 1/4)] = [0.6931472, 0.5623351], mean 0.6277411
    assert float(terms["entropy"]) == pytest.approx(0.6277411, rel=1e-6)
    # loss = 1.3862944 + 0.5*1 - 0.01*0.6277411 = 1.8800170
    assert float(loss) == pytest.approx(1.8800170, rel=1e-6)


def test_a2c_loss_of_normalized_advantages():
    head = CategoricalHead(2)
    logits = tf.constant([[0.0, 0.0], [0.0, 0.0]])  # log pi = ln 1/2 for every action
    _, terms = a2c_loss(head, logits, tf.zeros([2]), tf.constant([0, 1]), normalized(tf.constant([1.0, 5.0])),
                        tf.zeros([2]), value_coef=0.5, entropy_coef=0.0)
    # advantages [1, 5]: mean 3, std 2 -> [-1, 1]; policy_loss = -mean(ln(1/2) * [-1, 1]) = 0
    assert float(terms["policy_loss"]) == pytest.approx(0.0, abs=1e-6)
    _, terms = a2c_loss(head, logits, tf.zeros([2]), tf.constant([0, 1]), tf.constant([1.0, 5.0]),
                        tf.zeros([2]), value_coef=0.5, entropy_coef=0.0)
    # -mean(ln(1/2) * [1, 5]) = 3 ln 2
    assert float(terms["policy_loss"]) == pytest.approx(3 * math.log(2), rel=1e-6)


# --- the train step on a tiny network with set weights -------------------------------

TINY_ENV = EnvInfo(env_id="Tiny-v0", obs_shape=(2,), num_actions=2)


def _tiny_learner(**overrides) -> A2CLearner:
    """obs [2] -> relu(obs @ I) -> logits = h @ [[ln 3, 0], [0, 0]], V = h @ [1, 0.5]; zero biases."""
    config = A2CConfig(hidden_sizes=(2,), shared_torso=True, activation="relu", value_coef=0.5,
                       entropy_coef=0.01, learning_rate=1e-3, **overrides)
    learner = A2CLearner(config, TINY_ENV, _runtime())
    network = learner.network
    network.get_layer("torso_0").set_weights([np.eye(2, dtype=np.float32), np.zeros(2, np.float32)])
    network.get_layer("policy_head").set_weights([np.array([[LN3, 0.0], [0.0, 0.0]], np.float32),
                                                  np.zeros(2, np.float32)])
    network.get_layer("value_head").set_weights([np.array([[1.0], [0.5]], np.float32), np.zeros(1, np.float32)])
    return learner


TINY_BATCH = dict(
    obs=np.array([[1.0, 2.0], [-1.0, 3.0]], np.float32),
    actions=np.array([0, 1], np.int32),
    advantages=np.array([1.0, 2.0], np.float32),
    returns=np.array([3.0, 0.5], np.float32),
)


def test_train_step_loss_on_tiny_network_by_hand():
    learner = _tiny_learner()
    metrics, _ = _train(learner, **TINY_BATCH, learning_rate=1e-3)
    # s0 = [1, 2]:  h = relu([1, 2]) = [1, 2];  logits = [1*ln 3, 0] -> pi = [3/4, 1/4];  V = 1 + 2*0.5 = 2
    # s1 = [-1, 3]: h = [0, 3];                  logits = [0, 0]      -> pi = [1/2, 1/2];  V = 0 + 3*0.5 = 1.5
    # log pi(a|s) = [ln 3/4, ln 1/2] = [-0.2876821, -0.6931472]
    # policy_loss = -mean([-0.2876821 * 1, -0.6931472 * 2]) = (0.2876821 + 1.3862944) / 2 = 0.8369882
    assert metrics["policy_loss"] == pytest.approx(0.8369882, rel=1e-5)
    # value_loss = mean([(3 - 2)^2, (0.5 - 1.5)^2]) = 1
    assert metrics["value_loss"] == pytest.approx(1.0, rel=1e-5)
    # entropy = mean([0.5623351, 0.6931472]) = 0.6277411
    assert metrics["entropy"] == pytest.approx(0.6277411, rel=1e-5)
    # loss = 0.8369882 + 0.5*1 - 0.01*0.6277411 = 1.3307108
    assert metrics["loss"] == pytest.approx(1.3307108, rel=1e-5)
    assert metrics["grad_norm"] > 0
    assert int(learner.updates.numpy()) == 1


def test_train_step_returns_updated_weights_and_sets_learning_rate():
    learner = _tiny_learner()
    before = [v.numpy().copy() for v in learner.network.trainable_variables]
    _, weights = _train(learner, **TINY_BATCH, learning_rate=2.5e-4)
    after = [v.numpy() for v in learner.network.trainable_variables]
    assert len(weights) == len(after)
    for returned, variable in zip(weights, after):
        np.testing.assert_array_equal(returned, variable)
    assert any(not np.array_equal(b, a) for b, a in zip(before, after))
    assert float(learner.optimizer.learning_rate.numpy()) == pytest.approx(2.5e-4)


def test_train_step_does_not_retrace_across_batch_sizes_and_learning_rates():
    learner = _tiny_learner(lr_schedule="linear", total_env_steps=1000)
    rng = np.random.default_rng(0)
    # Rollouts starting at env steps 0, 250, 999, 1000: step sizes 1e-3, 7.5e-4, 1e-6, 0.
    for batch_size, start_env_step in ((40, 0), (16, 250), (40, 999), (3, 1000)):
        rollout = Rollout(rng.normal(size=(batch_size, 2)).astype(np.float32),
                          rng.integers(0, 2, batch_size).astype(np.int32),
                          rng.normal(size=batch_size).astype(np.float32),
                          rng.normal(size=batch_size).astype(np.float32),
                          np.zeros(batch_size, np.float32), start_env_step)
        learner.update(rollout)  # the loop's path: the concrete function
        assert float(learner.optimizer.learning_rate.numpy()) == pytest.approx(1e-3 * (1 - start_env_step / 1000))
        rows = learner.rows.pack(rollout.rows(), batch_dims=1)
        learner.train_step(*rows, np.float32(1e-3))  # the tf.function itself
        learner.train_step(*rows, 1e-3)  # a Python float too
    assert learner.train_step.experimental_get_tracing_count() == 1


def test_train_step_with_xla_matches_without():
    plain = _tiny_learner()
    compiled = A2CLearner(plain.config, TINY_ENV, _runtime(xla=True))
    compiled.network.set_weights(plain.network.get_weights())
    expected, _ = _train(plain, **TINY_BATCH, learning_rate=1e-3)
    metrics, _ = _train(compiled, **TINY_BATCH, learning_rate=1e-3)
    for name in ("loss", "policy_loss", "value_loss", "entropy"):
        assert metrics[name] == pytest.approx(expected[name], rel=1e-5)


def test_train_step_under_mixed_float16_uses_loss_scaling_and_float32_outputs():
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        config = A2CConfig(hidden_sizes=(8,))
        learner = A2CLearner(config, TINY_ENV, _runtime(mixed_precision="mixed_float16"))
        assert isinstance(learner.optimizer, keras.optimizers.LossScaleOptimizer)
        logits, values = learner.network(TINY_BATCH["obs"])
        assert logits.dtype == tf.float32 and values.dtype == tf.float32
        assert logits.shape == (2, 2) and values.shape == (2,)
        initial_scale = float(learner.optimizer.dynamic_scale.numpy())
        metrics, weights = _train(learner, **TINY_BATCH, learning_rate=1e-3)
        assert all(math.isfinite(metrics[name]) for name in ("loss", "policy_loss", "value_loss", "entropy"))
        # The float16 backward pass at the initial scale (2**15) may overflow, depending on the random
        # initialization: then grad_norm is inf, and the optimizer must have skipped the step and halved the scale.
        if not math.isfinite(metrics["grad_norm"]):
            assert float(learner.optimizer.dynamic_scale.numpy()) == initial_scale / 2
        assert all(w.dtype == np.float32 for w in weights)
    finally:
        keras.mixed_precision.set_global_policy(policy)


# --- NumPy mirror -------------------------------------------------------------------

@pytest.mark.parametrize("shared_torso, activation", [(False, "tanh"), (True, "tanh"), (False, "relu")])
def test_numpy_mirror_equals_keras_before_and_after_an_update(shared_torso, activation):
    env = EnvInfo(env_id="Box-v0", obs_shape=(8,), num_actions=4)
    config = A2CConfig(hidden_sizes=(64, 32), shared_torso=shared_torso, activation=activation)
    learner = A2CLearner(config, env, _runtime())
    mirror = numpy_networks.NumpyActorCritic(learner.network)
    obs = np.random.default_rng(1).normal(size=(16, 8)).astype(np.float32)

    def check():
        logits, values = learner.network(obs)
        mirror_logits, mirror_values = mirror(obs)
        np.testing.assert_allclose(mirror_logits, logits.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(mirror_values, values.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(mirror.value(obs), values.numpy(), rtol=1e-5, atol=1e-5)

    check()
    _, weights = _train(learner, obs, np.zeros(16, np.int32), np.ones(16, np.float32), np.ones(16, np.float32), 1e-2)
    mirror.update(weights)
    check()


# --- config, schedule and presets ----------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    ({"lr_schedule": "cosine"}, "lr_schedule must be one of constant, linear"),
    ({"optimizer": "sgd"}, "optimizer must be one of rmsprop, adam"),
    ({"rollout_length": 0}, "rollout_length must be > 0"),
    ({"gae_lambda": 1.5}, "gae_lambda must be in [0, 1]"),
    ({"activation": "gelu"}, "activation must be one of tanh, relu"),
])
def test_config_range_checks(overrides, message):
    with pytest.raises(config_lib.ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config_lib.apply_overrides(A2CConfig(), overrides, "--hp")


def test_linear_learning_rate_falls_to_zero_over_training():
    config = A2CConfig(learning_rate=8e-4, lr_schedule="linear", total_env_steps=1000)
    assert learning_rate_at(0, config) == pytest.approx(8e-4)
    assert learning_rate_at(250, config) == pytest.approx(6e-4)
    assert learning_rate_at(1000, config) == 0.0
    assert learning_rate_at(250, dataclasses.replace(config, lr_schedule="constant")) == 8e-4


def test_sb3_zoo_preset_is_the_zoo_settings():
    preset = presets.load_file(REPO_ROOT / "tfrl" / "presets" / "a2c-lunarlander-sb3zoo.json")
    config = config_lib.apply_overrides(A2CConfig(), preset.hparams, preset.name)
    assert (config.num_envs, config.rollout_length, config.gamma, config.total_env_steps) == (8, 5, 0.995, 200_000)
    assert (config.learning_rate, config.lr_schedule, config.entropy_coef) == (8.3e-4, "linear", 1e-5)
    assert (config.optimizer, config.rmsprop_decay, config.rmsprop_epsilon) == ("rmsprop", 0.99, 1e-5)
    assert (config.gae_lambda, config.value_coef, config.max_grad_norm) == (1.0, 0.5, 0.5)
    assert (config.hidden_sizes, config.activation, config.shared_torso) == ((64, 64), "tanh", False)
    assert config.normalize_advantage is False


@pytest.mark.parametrize("env_id, expected", [
    ("CartPole-v1", "a2c-cartpole"), ("LunarLander-v2", "a2c-lunarlander"), ("LunarLander-v3", "a2c-lunarlander"),
])
def test_presets_load_and_auto_pick_the_tuned_one(env_id, expected):
    preset = presets.find("a2c", env_id, dirs=[REPO_ROOT / "tfrl" / "presets"])
    assert preset.name == expected
    config_lib.apply_overrides(A2CConfig(), preset.hparams, preset.name)  # raises on a bad key or value


# --- numeric guard (tfrl.models.numerics) -----------------------------------------------------------

def test_a_nan_advantage_stops_the_update_naming_the_loss_and_gradients():
    learner = _tiny_learner()
    _train(learner, **TINY_BATCH, learning_rate=1e-3)  # update 1: finite
    batch = {**TINY_BATCH, "advantages": np.array([1.0, np.nan], np.float32)}
    with pytest.raises(numerics.NonFiniteError) as raised:
        _train(learner, **batch, learning_rate=1e-3)
    # The logits and values of update 2 are finite; the NaN advantage makes the policy loss and its gradients NaN.
    assert (raised.value.tensors, raised.value.gradient_step) == (["loss", "gradients"], 2)


def test_a_poisoned_value_weight_is_reported_as_non_finite_outputs():
    learner = _tiny_learner()
    head = learner.network.get_layer("value_head")
    head.set_weights([np.array([[np.inf], [0.5]], np.float32), np.zeros(1, np.float32)])
    with pytest.raises(numerics.NonFiniteError) as raised:
        _train(learner, **TINY_BATCH, learning_rate=1e-3)
    assert "policy logits or values" in raised.value.tensors


def test_the_learner_rewards_are_scaled_in_time_order_then_bootstrapped_where_truncated():
    """RolloutStorage.finish turns what collect_steps recorded into the learner's rewards: T=2 steps of N=2 envs,
    env 1 truncated at t=0 with V(final obs) = 5, env 0 terminated at t=1, gamma = 0.5."""
    from types import SimpleNamespace

    from tfrl.agents.actor_critic.heads import make_head
    from tfrl.agents.actor_critic.rollout import RolloutStorage
    from tfrl.envs import EnvInfo
    from tfrl.models.running_stats import RewardScaler

    head = make_head(EnvInfo("Two-v0", (1,), 2))
    storage = RolloutStorage(2, 2, (1,), head)
    steps = [SimpleNamespace(reward=np.array([1.0, 2.0]), terminated=np.array([False, False]),
                             truncated=np.array([False, True]), done=np.array([False, True])),
             SimpleNamespace(reward=np.array([3.0, 4.0]), terminated=np.array([True, False]),
                             truncated=np.array([False, False]), done=np.array([True, False]))]
    final_values = [np.array([0.0, 5.0], np.float32), None]
    for t, step in enumerate(steps):
        storage.record(t, step, np.zeros((2, 1), np.float32), np.zeros(2, np.int32), np.zeros(2, np.float32),
                       np.zeros((2, 2), np.float32), final_values[t], None)
    storage.finish(np.zeros(2, np.float32), 0.5, 1.0, head, 0)
    np.testing.assert_array_equal(storage.rewards, [[1.0, 2.0 + 0.5 * 5.0], [3.0, 4.0]])
    assert storage.env_rewards.dtype == np.float64  # the env's dtype, for the scaler's arithmetic

    scaler, by_hand = RewardScaler(2, 0.5, 10.0), RewardScaler(2, 0.5, 10.0)
    storage.finish(np.zeros(2, np.float32), 0.5, 1.0, head, 0, scaler)
    first = by_hand.scale(np.array([1.0, 2.0]), steps[0].done)
    second = by_hand.scale(np.array([3.0, 4.0]), steps[1].done)
    np.testing.assert_array_equal(storage.rewards, [[first[0], first[1] + 0.5 * 5.0], second])
    np.testing.assert_array_equal(scaler.returns, by_hand.returns)
    np.testing.assert_array_equal(by_hand.returns, [0.0, 4.0])  # G restarts where each episode ended


def test_adam_takes_the_configured_epsilon_and_refuses_a_non_positive_one():
    """A2C's optimizer=adam gets adam_epsilon, as PPO's and the off-policy agents' Adam do (default Keras' 1e-7)."""
    env = EnvInfo("CartPole-v1", (4,), 2)
    for epsilon in (1e-7, 1e-3):
        config = A2CConfig(optimizer="adam", adam_epsilon=epsilon, hidden_sizes=(8,))
        learner = A2CLearner(config, env, _runtime())
        inner = getattr(learner.optimizer, "inner_optimizer", learner.optimizer)
        assert isinstance(inner, keras.optimizers.Adam) and inner.epsilon == pytest.approx(epsilon)
    with pytest.raises(ValueError, match="adam_epsilon must be > 0"):
        A2CConfig(optimizer="adam", adam_epsilon=0.0)
