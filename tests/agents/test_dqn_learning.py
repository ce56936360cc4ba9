"""Tests for tfrl.agents.dqn.learning: the TD math by hand, and DQNLearner's step, target update and runtime options.

Tests that need another precision policy or other logical devices run in a fresh
Python process (TF configures devices once per process, and runtime.apply sets
the global Keras policy); the rest run here under float32 on the default device.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from fresh_process import run_json_script

from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, ReplayBatch, q_learning_loss, td_targets
from tfrl.agents.losses import huber
from tfrl.envs import EnvInfo
from tfrl.hardware import runtime as runtime_lib
from tfrl.hardware.runtime import RuntimeOptions
from tfrl.models import numerics

# --- td_targets, huber, q_learning_loss -------------------------------------------------

# Three transitions, gamma = 0.9:
#   row 0: cut by the time limit (truncated): the bootstrap stays, discount = gamma = 0.9
#   row 1: terminal: discount 0, the target is the reward alone
#   row 2: an ordinary step, discount 0.9
R_T = [1.0, 2.0, -1.0]
DISCOUNT_T = [0.9, 0.0, 0.9]
Q_T_TARGET = [[1.0, 3.0], [2.0, -1.0], [5.0, 4.0]]
Q_T_ONLINE = [[2.0, 1.0], [0.0, 4.0], [1.0, 3.0]]


def test_td_targets_vanilla():
    # max_a Q_target(s_t, a) = [3, 2, 5]
    # row 0: 1 + 0.9 * 3 = 3.7;  row 1: 2 + 0 * 2 = 2;  row 2: -1 + 0.9 * 5 = 3.5
    targets = td_targets(tf.constant(R_T), tf.constant(DISCOUNT_T), tf.constant(Q_T_TARGET))
    np.testing.assert_allclose(targets.numpy(), [3.7, 2.0, 3.5], rtol=1e-6)


def test_td_targets_double():
    # a* = argmax_a Q_online(s_t, a) = [0, 1, 1];  Q_target(s_t, a*) = [1, -1, 4]
    # row 0: 1 + 0.9 * 1 = 1.9;  row 1: 2 + 0 * (-1) = 2;  row 2: -1 + 0.9 * 4 = 2.6
    targets = td_targets(tf.constant(R_T), tf.constant(DISCOUNT_T), tf.constant(Q_T_TARGET),
                         tf.constant(Q_T_ONLINE))
    np.testing.assert_allclose(targets.numpy(), [1.9, 2.0, 2.6], rtol=1e-6)


@pytest.mark.parametrize("x, delta, expected", [
    (0.5, 1.0, 0.125),  # |x| <= delta: 0.5 x^2 = 0.125
    (-0.5, 1.0, 0.125),
    (1.0, 1.0, 0.5),  # the two pieces meet: 0.5 * 1 = 1 * (1 - 0.5)
    (3.0, 1.0, 2.5),  # |x| > delta: delta * (|x| - delta / 2) = 1 * (3 - 0.5) = 2.5
    (-3.0, 1.0, 2.5),
    (3.0, 2.0, 4.0),  # 2 * (3 - 1) = 4
    (1.5, 2.0, 1.125),  # 0.5 * 1.5^2 = 1.125
    (0.0, 1.0, 0.0),
])
def test_huber(x, delta, expected):
    assert float(huber(tf.constant(x), delta)) == pytest.approx(expected, rel=1e-6)


def test_huber_gradient_is_clipped_to_delta():
    # d huber / dx = x for |x| <= delta, delta * sign(x) beyond: the "error clipping" of Mnih et al. 2015.
    x = tf.constant([-5.0, -0.3, 0.4, 7.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(huber(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [-1.0, -0.3, 0.4, 1.0], rtol=1e-6)


def test_q_learning_loss_by_hand():
    # Q(s0, a=1) = 2, target 2.5: error 0.5 -> huber 0.125
    # Q(s1, a=0) = 3, target 6:   error 3   -> huber 2.5
    # loss = (0.125 + 2.5) / 2 = 1.3125
    q_tm1 = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    targets = tf.Variable([2.5, 6.0])
    with tf.GradientTape(persistent=True) as tape:
        loss, q_a = q_learning_loss(q_tm1, tf.constant([1, 0]), targets)
    assert float(loss) == pytest.approx(1.3125, rel=1e-6)
    np.testing.assert_allclose(q_a.numpy(), [2.0, 3.0])
    assert tape.gradient(loss, targets) is None  # no gradient flows into the target


# --- DQNLearner on float32, default device -----------------------------------------------

@pytest.fixture(scope="module")
def runtime():
    # Same device settings as TF's defaults, so it works after other tests initialized TF in this process.
    return runtime_lib.apply(RuntimeOptions())


TINY_ENV = EnvInfo(env_id="Tiny-v0", obs_shape=(2,), num_actions=2)
LR = 0.01

# Hand-set weights: torso_0 is the identity (ReLU passes positive inputs), so h = s.
#   Q_online(s) = [s0 + s1 + 1, 2 s0 + s1]      (q_head kernel [[1, 2], [1, 1]], bias [1, 0])
#   Q_target(s) = [2 s0,        s0 + 3 s1]      (q_head kernel [[2, 1], [0, 3]], bias [0, 0])
IDENTITY_TORSO = [np.eye(2, dtype=np.float32), np.zeros(2, np.float32)]
ONLINE_HEAD = [np.array([[1.0, 2.0], [1.0, 1.0]], np.float32), np.array([1.0, 0.0], np.float32)]
TARGET_HEAD = [np.array([[2.0, 1.0], [0.0, 3.0]], np.float32), np.zeros(2, np.float32)]

# A batch of B=2, gamma 0.9:
#   row 0: s=[1, 2], a=0, r=1, discount 0.9, s'=[3, 0]
#   row 1: s=[2, 1], a=1, r=0, discount 0 (terminal), s'=[1, 1]
# Q_online(s) = [[4, 4], [4, 5]] -> Q(s, a) = [4, 5], q_mean = 4.5
# Q_online(s'_0) = [4, 6] -> a* = 1;  Q_target(s'_0) = [6, 3]
HAND_BATCH = {
    "obs": np.array([[1.0, 2.0], [2.0, 1.0]], np.float32),
    "action": np.array([0, 1], np.int32),
    "reward": np.array([1.0, 0.0], np.float32),
    "discount": np.array([0.9, 0.0], np.float32),
    "next_obs": np.array([[3.0, 0.0], [1.0, 1.0]], np.float32),
}
# Double DQN:  target_0 = 1 + 0.9 * Q_target(s'_0, a*=1) = 1 + 0.9 * 3 = 3.7;  target_1 = 0
#   errors: 3.7 - 4 = -0.3 -> huber 0.045;  0 - 5 = -5 -> huber 4.5;  loss = (0.045 + 4.5) / 2 = 2.2725
HAND_DOUBLE_LOSS = 2.2725
# Vanilla DQN: target_0 = 1 + 0.9 * max Q_target(s'_0) = 1 + 0.9 * 6 = 6.4
#   errors: 2.4 -> huber 2.4 - 0.5 = 1.9;  -5 -> 4.5;  loss = (1.9 + 4.5) / 2 = 3.2
HAND_VANILLA_LOSS = 3.2


def _stack(batch, k):
    """One [B, ...] batch repeated into the learner's [K, B, ...] layout."""
    return {name: np.stack([value] * k) for name, value in batch.items()}


def _train(learner, batch, update_target):
    """(metrics, weights) of one update call."""
    update = learner.update(ReplayBatch(batch, update_target))
    return update.metrics, update.weights


def _call(learner, batch, update_target=False):
    metrics, weights = _train(learner, batch, update_target)
    return metrics["loss"], metrics["q_mean"], weights


def _weights(model):
    return [v.numpy().copy() for v in model.trainable_variables]


def _hand_learner(runtime, **config):
    config = DQNConfig(hidden_sizes=(2,), learning_rate=LR, batch_size=2, **config)
    learner = DQNLearner(config, TINY_ENV, runtime)
    learner.online.get_layer("torso_0").set_weights(IDENTITY_TORSO)
    learner.online.get_layer("q_head").set_weights(ONLINE_HEAD)
    learner.target.get_layer("torso_0").set_weights(IDENTITY_TORSO)
    learner.target.get_layer("q_head").set_weights(TARGET_HEAD)
    return learner


def _np_q(weights, obs):
    """NumPy forward pass of a plain q_network from its trainable weights [k0, b0, k1, b1, ..., k_head, b_head]."""
    x = obs.reshape(obs.shape[0], -1)
    pairs = list(zip(weights[::2], weights[1::2]))
    for kernel, bias in pairs[:-1]:
        x = np.maximum(x @ kernel + bias, 0.0)
    return x @ pairs[-1][0] + pairs[-1][1]


def _np_loss(online, target, batch, double):
    """The DQN loss of one [B, ...] batch, in NumPy (float64), independent of the code under test."""
    q_tm1 = _np_q(online, batch["obs"].astype(np.float64))
    q_t_target = _np_q(target, batch["next_obs"].astype(np.float64))
    if double:
        a_star = _np_q(online, batch["next_obs"].astype(np.float64)).argmax(axis=1)
    else:
        a_star = q_t_target.argmax(axis=1)
    targets = batch["reward"] + batch["discount"] * q_t_target[np.arange(len(a_star)), a_star]
    errors = targets - q_tm1[np.arange(len(a_star)), batch["action"]]
    abs_e = np.abs(errors)
    return float(np.mean(np.where(abs_e <= 1.0, 0.5 * errors ** 2, abs_e - 0.5)))


def test_hand_weights_give_the_hand_computed_q_values(runtime):
    learner = _hand_learner(runtime)
    np.testing.assert_allclose(learner.online(HAND_BATCH["obs"]).numpy(), [[4, 4], [4, 5]])
    np.testing.assert_allclose(learner.online(HAND_BATCH["next_obs"]).numpy(), [[4, 6], [3, 3]])
    np.testing.assert_allclose(learner.target(HAND_BATCH["next_obs"]).numpy(), [[6, 3], [2, 4]])


def test_gradient_step_double_dqn_by_hand(runtime):
    learner = _hand_learner(runtime, double_dqn=True)
    before = _weights(learner.online)
    target_before = _weights(learner.target)

    loss, q_mean, returned = _call(learner, _stack(HAND_BATCH, 1))

    assert loss == pytest.approx(HAND_DOUBLE_LOSS, rel=1e-6)  # the loss before the step
    assert q_mean == pytest.approx(4.5, rel=1e-6)
    # dL/dQ(s,a) = -clip(error, -1, 1) / B:  row 0: 0.3 / 2 = 0.15;  row 1: 1 / 2 = 0.5
    # q_head kernel grad = [h_0 * 0.15 | h_1 * 0.5] = [[0.15, 1.0], [0.3, 0.5]], bias grad [0.15, 0.5]
    # dL/dh: row 0: 0.15 * [1, 1];  row 1: 0.5 * [2, 1] = [1, 0.5]
    # torso kernel grad = [[1*.15 + 2*1, 1*.15 + 2*.5], [2*.15 + 1*1, 2*.15 + 1*.5]] = [[2.15, 1.15], [1.3, 0.8]],
    # torso bias grad = [1.15, 0.65]. All gradients are > 0, and Adam's first step is lr * sign(g)
    # (m_hat / sqrt(v_hat) = g / |g|; the norm clip at 10 does not bind: |g| ~ 3.1), so every weight falls by lr.
    after = _weights(learner.online)
    for w_before, w_after in zip(before, after):
        np.testing.assert_allclose(w_after, w_before - LR, atol=1e-6)
    for w_returned, w_after in zip(returned, after):  # the weights handed to the actor are the new ones
        np.testing.assert_array_equal(w_returned, w_after)
    for w_before, w_after in zip(target_before, _weights(learner.target)):  # no target update asked
        np.testing.assert_array_equal(w_after, w_before)
    assert int(learner.gradient_steps.numpy()) == 1


def test_gradient_step_vanilla_dqn_by_hand(runtime):
    learner = _hand_learner(runtime, double_dqn=False)
    loss, q_mean, _ = _call(learner, _stack(HAND_BATCH, 1))
    assert loss == pytest.approx(HAND_VANILLA_LOSS, rel=1e-6)
    assert q_mean == pytest.approx(4.5, rel=1e-6)


def test_k_gradient_steps_return_the_mean_loss_over_the_steps(runtime):
    learner = _hand_learner(runtime, double_dqn=True)
    online_0 = _weights(learner.online)
    target = _weights(learner.target)

    loss, _, _ = _call(learner, _stack(HAND_BATCH, 2))

    # Step 1 sees the hand weights (loss 2.2725); step 2 sees them minus lr (all gradients were > 0).
    loss_1 = _np_loss(online_0, target, HAND_BATCH, double=True)
    loss_2 = _np_loss([w - LR for w in online_0], target, HAND_BATCH, double=True)
    assert loss_1 == pytest.approx(HAND_DOUBLE_LOSS)
    assert loss == pytest.approx((loss_1 + loss_2) / 2, rel=1e-5)
    assert int(learner.gradient_steps.numpy()) == 2


@pytest.mark.parametrize("double_dqn", [True, False])
def test_loss_matches_numpy_on_random_weights_and_batch(runtime, double_dqn):
    env = EnvInfo(env_id="Random-v0", obs_shape=(4,), num_actions=3)
    learner = DQNLearner(DQNConfig(hidden_sizes=(8, 8), double_dqn=double_dqn, batch_size=16), env, runtime)
    rng = np.random.default_rng(0)
    for variable in learner.target.trainable_variables:  # a target different from the online network
        variable.assign(rng.normal(0, 0.5, size=variable.shape).astype(np.float32))
    batch = {
        "obs": rng.normal(size=(16, 4)).astype(np.float32),
        "action": rng.integers(0, 3, size=16).astype(np.int32),
        "reward": rng.normal(0, 2, size=16).astype(np.float32),
        "discount": rng.choice([0.0, 0.99], size=16).astype(np.float32),
        "next_obs": rng.normal(size=(16, 4)).astype(np.float32),
    }
    expected = _np_loss(_weights(learner.online), _weights(learner.target), batch, double=double_dqn)
    loss, _, _ = _call(learner, _stack(batch, 1))
    assert loss == pytest.approx(expected, rel=1e-5)


def test_train_wrapper_returns_python_floats_and_numpy_weights(runtime):
    learner = _hand_learner(runtime)
    metrics, weights = _train(learner, _stack(HAND_BATCH, 1), update_target=False)
    assert metrics == {"loss": pytest.approx(HAND_DOUBLE_LOSS, rel=1e-6), "q_mean": pytest.approx(4.5, rel=1e-6)}
    assert all(isinstance(v, float) for v in metrics.values())
    assert [w.shape for w in weights] == [tuple(v.shape) for v in learner.online.trainable_variables]
    assert all(isinstance(w, np.ndarray) for w in weights)


# --- target network update ---------------------------------------------------------------

def test_hard_target_update_copies_online_before_the_gradient_steps(runtime):
    learner = _hand_learner(runtime, target_update_tau=1.0, double_dqn=True)
    online_before = _weights(learner.online)

    loss, _, _ = _call(learner, _stack(HAND_BATCH, 1), update_target=True)

    for target_w, online_w in zip(_weights(learner.target), online_before):
        np.testing.assert_array_equal(target_w, online_w)
    # The step already bootstraps from the copied target, Q_target = Q_online:
    # target_0 = 1 + 0.9 * Q_online(s'_0, a*=1) = 1 + 0.9 * 6 = 6.4 -> the vanilla-DQN numbers, loss 3.2.
    assert loss == pytest.approx(3.2, rel=1e-6)


def test_polyak_target_update_averages(runtime):
    learner = _hand_learner(runtime, target_update_tau=0.5)
    online_before, target_before = _weights(learner.online), _weights(learner.target)

    _call(learner, _stack(HAND_BATCH, 1), update_target=True)

    # target <- 0.5 * online + 0.5 * target, e.g. head kernel: 0.5 * [[1, 2], [1, 1]] + 0.5 * [[2, 1], [0, 3]]
    #   = [[1.5, 1.5], [0.5, 2]]
    for after, online_w, target_w in zip(_weights(learner.target), online_before, target_before):
        np.testing.assert_allclose(after, 0.5 * online_w + 0.5 * target_w, atol=1e-7)
    np.testing.assert_allclose(learner.target.get_layer("q_head").get_weights()[0], [[1.5, 1.5], [0.5, 2.0]])


def test_no_target_update_leaves_target_unchanged(runtime):
    learner = _hand_learner(runtime, target_update_tau=1.0)
    target_before = _weights(learner.target)
    _call(learner, _stack(HAND_BATCH, 3), update_target=False)
    for before, after in zip(target_before, _weights(learner.target)):
        np.testing.assert_array_equal(after, before)
    assert not np.allclose(_weights(learner.online)[0], target_before[0])  # the online net did move


def test_train_step_traces_once_for_any_k_and_batch_size(runtime):
    learner = DQNLearner(DQNConfig(hidden_sizes=(4,), batch_size=2), TINY_ENV, runtime)
    rng = np.random.default_rng(0)
    for k, b, update_target in [(1, 2, False), (3, 5, True), (2, 7, False), (4, 1, True)]:
        batch = {
            "obs": rng.normal(size=(k, b, 2)).astype(np.float32),
            "action": rng.integers(0, 2, size=(k, b)).astype(np.int32),
            "reward": rng.normal(size=(k, b)).astype(np.float32),
            "discount": np.full((k, b), 0.99, np.float32),
            "next_obs": rng.normal(size=(k, b, 2)).astype(np.float32),
        }
        _train(learner, batch, update_target=update_target)  # a Python bool, as the loop passes it
    assert learner.train_step.experimental_get_tracing_count() == 1
    assert int(learner.gradient_steps.numpy()) == 1 + 3 + 2 + 4


def test_xla_and_non_xla_steps_agree():
    # apply() may be repeated with the same device settings; only xla differs.
    runtime_plain = runtime_lib.apply(RuntimeOptions(xla=False))
    runtime_xla = runtime_lib.apply(RuntimeOptions(xla=True))
    env = EnvInfo(env_id="Random-v0", obs_shape=(4,), num_actions=3)
    config = DQNConfig(hidden_sizes=(16, 16), batch_size=8, dueling=True)
    plain = DQNLearner(config, env, runtime_plain)
    xla = DQNLearner(config, env, runtime_xla)
    xla.online.set_weights(plain.online.get_weights())
    xla.target.set_weights([w + 0.1 for w in plain.online.get_weights()])
    plain.target.set_weights(xla.target.get_weights())
    rng = np.random.default_rng(1)
    batch = {
        "obs": rng.normal(size=(3, 8, 4)).astype(np.float32),
        "action": rng.integers(0, 3, size=(3, 8)).astype(np.int32),
        "reward": rng.normal(size=(3, 8)).astype(np.float32),
        "discount": rng.choice([0.0, 0.99], size=(3, 8)).astype(np.float32),
        "next_obs": rng.normal(size=(3, 8, 4)).astype(np.float32),
    }

    loss_plain, q_plain, weights_plain = _call(plain, batch, update_target=True)
    loss_xla, q_xla, weights_xla = _call(xla, batch, update_target=True)

    assert loss_xla == pytest.approx(loss_plain, rel=1e-4, abs=1e-5)
    assert q_xla == pytest.approx(q_plain, rel=1e-4, abs=1e-5)
    for a, b in zip(weights_plain, weights_xla):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    for a, b in zip(_weights(plain.target), _weights(xla.target)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    assert keras.mixed_precision.global_policy().name == "float32"


# --- mixed precision and device placement, each in a fresh process -----------------------

_LEARNER_PRELUDE = """
    import json
    import numpy as np
    import keras
    import tensorflow as tf
    from tfrl.hardware import runtime as runtime_lib
    from tfrl.agents.dqn.config import DQNConfig
    from tfrl.agents.dqn.learning import DQNLearner, ReplayBatch
    from tfrl.envs import EnvInfo

    def _train(learner, batch, update_target):
        update = learner.update(ReplayBatch(batch, update_target))
        return update.metrics, update.weights

    def make_batch(k, b, obs_scale=1.0, seed=0):
        rng = np.random.default_rng(seed)
        return {
            "obs": (obs_scale * rng.normal(size=(k, b, 4))).astype(np.float32),
            "action": rng.integers(0, 2, size=(k, b)).astype(np.int32),
            "reward": rng.normal(size=(k, b)).astype(np.float32),
            "discount": np.full((k, b), 0.99, np.float32),
            "next_obs": rng.normal(size=(k, b, 4)).astype(np.float32),
        }

    def weights(model):
        return [v.numpy().copy() for v in model.trainable_variables]

    def dtype_name(dtype):
        return tf.as_dtype(dtype).name

    ENV = EnvInfo(env_id="Random-v0", obs_shape=(4,), num_actions=2)
"""


@pytest.fixture(scope="module")
def mixed_precision_process():
    """One fresh process: a mixed_float16 learner (with an overflow), then a mixed_bfloat16 one.

    apply() may be repeated with other precision as long as the device settings stay the same.
    """
    return run_json_script(_LEARNER_PRELUDE + """
    def summary(learner):
        return {
            "optimizer": type(learner.optimizer).__name__,
            "torso_compute_dtype": learner.online.get_layer("torso_0").compute_dtype,
            "variable_dtype": dtype_name(learner.online.trainable_variables[0].dtype),
            "q_dtype": dtype_name(learner.online(make_batch(1, 8)["obs"][0]).dtype),
        }

    rt = runtime_lib.apply(runtime_lib.RuntimeOptions(mixed_precision="mixed_float16"))
    learner = DQNLearner(DQNConfig(hidden_sizes=(16, 16), batch_size=8), ENV, rt)
    f16 = summary(learner)
    metrics, _ = _train(learner, make_batch(2, 8), update_target=True)
    f16["loss"], f16["q_mean"] = metrics["loss"], metrics["q_mean"]
    f16["scale_before_overflow"] = float(learner.optimizer.dynamic_scale.numpy())

    # |obs| ~ 1e6 > 65504, the largest float16: the torso's first activations overflow to inf,
    # the loss and gradients are nan, and the loss scale optimizer must skip the step and halve the scale.
    online_before, target_before = weights(learner.online), weights(learner.target)
    _train(learner, make_batch(1, 8, obs_scale=1e6, seed=1), update_target=False)
    f16["scale_after_overflow"] = float(learner.optimizer.dynamic_scale.numpy())
    f16["online_unchanged"] = all(np.array_equal(a, b) for a, b in zip(online_before, weights(learner.online)))
    f16["online_finite"] = all(np.isfinite(w).all() for w in weights(learner.online))
    f16["target_unchanged"] = all(np.array_equal(a, b) for a, b in zip(target_before, weights(learner.target)))

    # A normal batch afterwards trains again at the halved scale.
    metrics, _ = _train(learner, make_batch(1, 8, seed=2), update_target=False)
    f16["loss_after_recovery"] = metrics["loss"]
    f16["online_moved_after_recovery"] = not all(
        np.array_equal(a, b) for a, b in zip(online_before, weights(learner.online)))
    f16["scale_after_recovery"] = float(learner.optimizer.dynamic_scale.numpy())

    rt = runtime_lib.apply(runtime_lib.RuntimeOptions(mixed_precision="mixed_bfloat16"))
    learner = DQNLearner(DQNConfig(hidden_sizes=(16, 16), batch_size=8), ENV, rt)
    bf16 = summary(learner)
    before = weights(learner.online)
    metrics, _ = _train(learner, make_batch(2, 8), update_target=True)
    bf16["loss"], bf16["q_mean"] = metrics["loss"], metrics["q_mean"]
    bf16["online_moved"] = not all(np.array_equal(a, b) for a, b in zip(before, weights(learner.online)))
    print(json.dumps({"float16": f16, "bfloat16": bf16}))
    """)


def test_mixed_float16_step_runs_with_float32_q_values_and_finite_loss(mixed_precision_process):
    result = mixed_precision_process["float16"]
    assert result["optimizer"] == "LossScaleOptimizer"
    assert result["torso_compute_dtype"] == "float16"
    assert result["variable_dtype"] == "float32"
    assert result["q_dtype"] == "float32"
    assert np.isfinite(result["loss"]) and np.isfinite(result["q_mean"])


def test_float16_loss_scale_halves_and_skips_the_step_on_overflow(mixed_precision_process):
    result = mixed_precision_process["float16"]
    assert result["scale_before_overflow"] == 2.0 ** 15  # Keras' initial scale, no growth after 2 steps
    assert result["scale_after_overflow"] == 2.0 ** 14
    assert result["online_unchanged"] and result["online_finite"]
    assert result["target_unchanged"]
    assert np.isfinite(result["loss_after_recovery"])
    assert result["online_moved_after_recovery"]
    assert result["scale_after_recovery"] == 2.0 ** 14


def test_mixed_bfloat16_step_runs_with_float32_q_values_and_finite_loss(mixed_precision_process):
    result = mixed_precision_process["bfloat16"]
    assert result["optimizer"] == "Adam"  # bfloat16 has float32's range: no loss scaling
    assert result["torso_compute_dtype"] == "bfloat16"
    assert result["variable_dtype"] == "float32"
    assert result["q_dtype"] == "float32"
    assert np.isfinite(result["loss"]) and np.isfinite(result["q_mean"])
    assert result["online_moved"]


def test_learner_variables_and_step_on_second_logical_cpu():
    result = run_json_script(_LEARNER_PRELUDE + """
    rt = runtime_lib.apply(runtime_lib.RuntimeOptions(device="cpu:1", logical_cpus=2))
    learner = DQNLearner(DQNConfig(hidden_sizes=(16,), batch_size=8), ENV, rt)
    def device(v):
        return v.device if isinstance(v, tf.Variable) else v.value.device  # Keras variables wrap a tf.Variable
    devices = {
        "online": [device(v) for v in learner.online.variables],
        "target": [device(v) for v in learner.target.variables],
        "optimizer": [device(v) for v in learner.optimizer.variables],
        "gradient_steps": [device(learner.gradient_steps)],
    }
    metrics, _ = _train(learner, make_batch(2, 8), update_target=True)
    print(json.dumps({"device_name": rt.device_name, "devices": devices, "loss": metrics["loss"],
                      "gradient_steps": int(learner.gradient_steps.numpy())}))
    """)
    assert result["device_name"] == "/device:CPU:1"
    for group, devices in result["devices"].items():
        assert devices, group
        for name in devices:
            assert name.endswith("/device:CPU:1"), (group, name)
    assert np.isfinite(result["loss"])
    assert result["gradient_steps"] == 2


# --- numeric guard (tfrl.models.numerics) -----------------------------------------------------------

def test_a_nan_reward_stops_the_train_call_naming_the_loss_and_gradients_and_the_first_bad_step(runtime):
    learner = _hand_learner(runtime)
    _train(learner, _stack(HAND_BATCH, 3), False)  # gradient steps 1..3, all finite
    batch = _stack(HAND_BATCH, 3)
    batch["reward"][1, 0] = np.nan  # the 2nd of this call's 3 steps: gradient step 5
    with pytest.raises(numerics.NonFiniteError) as raised:
        _train(learner, batch, False)
    # Q(s) is finite at step 5 (4 finite updates so far); the NaN target makes the loss and its gradients NaN.
    assert (raised.value.tensors, raised.value.gradient_step) == (["loss", "gradients"], 5)
    assert str(raised.value) == ("training diverged: non-finite loss, gradients at gradient step 5; "
                                 "stopped without saving: no checkpoint had been written")
    error = raised.value.at(env_step=1234, last_checkpoint=(1000, 4))
    assert str(error) == ("training diverged: non-finite loss, gradients at env step 1234 (gradient step 5); "
                          "stopped without saving: checkpoint 4 (env step 1000) is the newest")


def test_a_poisoned_weight_is_reported_as_non_finite_q_values(runtime):
    learner = _hand_learner(runtime)
    head = learner.online.get_layer("q_head")
    kernel, bias = head.get_weights()
    kernel[0, 0] = np.inf  # Q(s, 0) = inf * s0 + ...: +inf for both rows (s0 > 0)
    head.set_weights([kernel, bias])
    with pytest.raises(numerics.NonFiniteError) as raised:
        _train(learner, _stack(HAND_BATCH, 2), False)
    assert "Q-values" in raised.value.tensors and raised.value.gradient_step == 1


def test_finite_steps_raise_nothing_and_keep_the_output_layout(runtime):
    learner = _hand_learner(runtime)
    loss, q_mean, weights = _call(learner, _stack(HAND_BATCH, 1))
    assert loss == pytest.approx(HAND_DOUBLE_LOSS) and q_mean == pytest.approx(4.5)
    assert [w.shape for w in weights] == [(2, 2), (2,), (2, 2), (2,)]


def test_the_layer_init_and_adam_epsilon_reach_the_learner(runtime):
    """SB3's DQN (PyTorch) initializes biases uniformly and uses Adam's epsilon 1e-8; Keras, zero biases and 1e-7.
    The SB3 presets choose the former (docs/benchmarks.md, dqn-cartpole)."""
    torch_like = DQNLearner(DQNConfig(hidden_sizes=(8,), layer_init="torch", adam_epsilon=1e-8), TINY_ENV, runtime)
    keras_default = DQNLearner(DQNConfig(hidden_sizes=(8,)), TINY_ENV, runtime)
    bias = torch_like.online.get_layer("torso_0").get_weights()[1]
    assert np.abs(bias).max() <= 1 / np.sqrt(2) and np.any(bias != 0)  # fan_in 2
    assert not np.any(keras_default.online.get_layer("torso_0").get_weights()[1])
    for got, want in zip(torch_like.target.get_weights(), torch_like.online.get_weights()):
        np.testing.assert_array_equal(got, want)  # the target starts as a copy, whatever the init
    assert float(torch_like.optimizer.epsilon) == 1e-8 and float(keras_default.optimizer.epsilon) == 1e-7


def test_one_schedule_type_by_hand():
    from tfrl.schedules import Schedule

    # start + min(position / length, 1) * (end - start): 1.0 -> 0.1 over 100 positions.
    decay = Schedule(1.0, 0.1, 100)
    assert [decay.at(p) for p in (0, 50, 100, 1000)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    assert Schedule(3.0).at(10**9) == 3.0 and Schedule(1.0, 0.5, 0).at(0) == 0.5
    assert Schedule.named("linear", 8e-4, 1000).at(250) == pytest.approx(6e-4)
    assert Schedule.named("constant", 8e-4, 1000).at(250) == 8e-4
    # In the graph: the same line over an optimizer's iterations (Keras' PolynomialDecay of power 1).
    keras_schedule = Schedule(1.0, 0.1, 100).keras_schedule()
    assert float(keras_schedule(50)) == pytest.approx(0.55) and float(keras_schedule(200)) == pytest.approx(0.1)
    assert Schedule(0.5, 0.5, 100).keras_schedule() == 0.5
