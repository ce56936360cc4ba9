"""Tests for QR-DQN (tfrl.agents.qrdqn): the quantile targets and the quantile Huber loss by hand, one gradient
step of the learner by hand, and a short run that trains, resumes, evaluates, exports and serves."""

import json

import numpy as np
import pytest
import tensorflow as tf

import tfrl
from tfrl import agents
from tfrl.agents.dqn.learning import ReplayBatch
from tfrl.agents.qrdqn import policy as qrdqn_policy
from tfrl.agents.qrdqn.config import QRDQNConfig
from tfrl.agents.qrdqn.learning import QRDQNLearner, quantile_td_targets
from tfrl.agents.losses import quantile_huber_loss, quantile_midpoints
from tfrl.envs import EnvInfo
from tfrl.errors import UsageError
from tfrl.hardware import runtime as runtime_lib
from tfrl.hardware.runtime import RuntimeOptions
from tfrl.models import serving
from tfrl.run import launch

# --- the math ----------------------------------------------------------------------------------------------------


def test_the_quantile_midpoints():
    # tau_i = (2i + 1) / (2N): N = 4 -> 1/8, 3/8, 5/8, 7/8
    np.testing.assert_allclose(quantile_midpoints(4).numpy(), [0.125, 0.375, 0.625, 0.875])


@pytest.mark.parametrize("kappa, expected", [
    # theta = [0, 1] (tau = 1/4, 3/4), targets T = [0.5, 3]; u_ij = T_j - theta_i:
    #   i = 0: u = [0.5, 3]   weights |0.25 - 0| = 0.25 for both
    #   i = 1: u = [-0.5, 2]  weights |0.75 - 1| = 0.25 (u < 0), |0.75 - 0| = 0.75
    # kappa 1: huber = [0.125, 2.5] and [0.125, 1.5]
    #   rho_0 = [0.03125, 0.625] -> mean 0.328125; rho_1 = [0.03125, 1.125] -> mean 0.578125; sum 0.90625
    (1.0, 0.90625),
    # kappa 2: huber_2 / 2 = [0.0625, 2 * (3 - 1) / 2 = 2] and [0.0625, 0.5 * 4 / 2 = 1]
    #   rho_0 = [0.015625, 0.5] -> 0.2578125; rho_1 = [0.015625, 0.75] -> 0.3828125; sum 0.640625
    (2.0, 0.640625),
])
def test_the_quantile_huber_loss_by_hand(kappa, expected):
    theta, targets = tf.Variable([[0.0, 1.0]]), tf.Variable([[0.5, 3.0]])
    with tf.GradientTape(persistent=True) as tape:
        loss = quantile_huber_loss(theta, targets, kappa)
    np.testing.assert_allclose(loss.numpy(), [expected], rtol=1e-6)
    assert tape.gradient(loss, targets) is None  # no gradient flows into the target
    # d loss / d theta_i = -mean_j w_ij * huber'(u_ij) / kappa; kappa 1: i = 0: -(0.25 * 0.5 + 0.25 * 1) / 2 = -0.1875
    #   i = 1: -(0.25 * -0.5 + 0.75 * 1) / 2 = -0.3125
    if kappa == 1.0:
        np.testing.assert_allclose(tape.gradient(loss, theta).numpy(), [[-0.1875, -0.3125]], rtol=1e-6)


def test_the_rows_of_the_loss_are_independent_and_one_quantile_is_the_huber_loss():
    # N = 1: tau = 0.5, rho = 0.5 * huber(u): u = 3 -> 0.5 * 2.5 = 1.25; u = -0.5 -> 0.5 * 0.125 = 0.0625
    loss = quantile_huber_loss(tf.constant([[0.0], [1.0]]), tf.constant([[3.0], [0.5]]))
    np.testing.assert_allclose(loss.numpy(), [1.25, 0.0625], rtol=1e-6)


# z_t_target [B=1, A=2, N=2]: action 0 -> [1, 3] (mean 2), action 1 -> [0, 10] (mean 5); r = 1, discount 0.5
Z_T = tf.constant([[[1.0, 3.0], [0.0, 10.0]]])
R_T, D_T = tf.constant([1.0]), tf.constant([0.5])


def test_quantile_targets_bootstrap_from_the_greedy_actions_quantiles():
    # a* = argmax mean = 1: T = 1 + 0.5 * [0, 10] = [1, 6]
    np.testing.assert_allclose(quantile_td_targets(R_T, D_T, Z_T).numpy(), [[1.0, 6.0]])
    # double: the online means pick a* = 0 (online [[5, 5], [0, 0]]): T = 1 + 0.5 * [1, 3] = [1.5, 2.5]
    online = tf.constant([[[5.0, 5.0], [0.0, 0.0]]])
    np.testing.assert_allclose(quantile_td_targets(R_T, D_T, Z_T, online).numpy(), [[1.5, 2.5]])


def test_quantile_targets_range_over_the_legal_actions_and_a_state_without_one_bootstraps_from_zero():
    legal = tf.constant([[True, False]])  # a* = 0 although action 1's mean is larger
    np.testing.assert_allclose(quantile_td_targets(R_T, D_T, Z_T, legal_t=legal).numpy(), [[1.5, 2.5]])
    nothing = tf.constant([[False, False]])
    np.testing.assert_allclose(quantile_td_targets(R_T, D_T, Z_T, legal_t=nothing).numpy(), [[1.0, 1.0]])


# --- one gradient step of the learner, by hand ---------------------------------------------------------------------

LR = 0.01
TINY_ENV = EnvInfo(env_id="Tiny-v0", obs_shape=(2,), num_actions=2)
# torso_0 is the identity (ReLU passes positive inputs), so h = s. The head's columns are (a0 q0, a0 q1, a1 q0, a1 q1):
#   online  Z(s) = a0: [s0, s0 + s1],  a1: [s1, 2 s1]
#   target  Z(s) = a0: [s0, 4 s0],     a1: [s1, s1]
IDENTITY_TORSO = [np.eye(2, dtype=np.float32), np.zeros(2, np.float32)]
ONLINE_HEAD = [np.array([[1, 1, 0, 0], [0, 1, 1, 2]], np.float32), np.zeros(4, np.float32)]
TARGET_HEAD = [np.array([[1, 4, 0, 0], [0, 0, 1, 1]], np.float32), np.zeros(4, np.float32)]
# B = 1: s = [1, 2], a = 1, r = 1, discount 0.5, s' = [1, 2]. theta = Z_online(s)[1] = [2, 4], q_mean 3.
#   target Z(s') = a0: [1, 4] (mean 2.5), a1: [2, 2] (mean 2);  online Z(s') = a0: [1, 3] (mean 2), a1: [2, 4] (mean 3)
BATCH = {"obs": np.array([[1.0, 2.0]], np.float32), "action": np.array([1], np.int32),
         "reward": np.array([1.0], np.float32), "discount": np.array([0.5], np.float32),
         "next_obs": np.array([[1.0, 2.0]], np.float32)}
# Vanilla: a* = 0, T = 1 + 0.5 * [1, 4] = [1.5, 3].
#   i = 0 (theta 2, tau 1/4): u = [-0.5, 1], w = [0.75, 0.25], huber = [0.125, 0.5] -> rho mean (0.09375 + 0.125) / 2
#   i = 1 (theta 4, tau 3/4): u = [-2.5, -1], w = 0.25, huber = [2, 0.5] -> rho mean (0.5 + 0.125) / 2
#   loss = 0.109375 + 0.3125 = 0.421875
# Double: a* = 1, T = 1 + 0.5 * [2, 2] = [2, 2]: i = 0: u = 0 -> 0; i = 1: u = -2 twice, 0.25 * 1.5 -> loss 0.375
VANILLA_LOSS, DOUBLE_LOSS = 0.421875, 0.375


@pytest.fixture(scope="module")
def runtime():
    return runtime_lib.apply(RuntimeOptions())


def _hand_learner(runtime, **config):
    config = QRDQNConfig(hidden_sizes=(2,), learning_rate=LR, batch_size=1, num_quantiles=2, **config)
    learner = QRDQNLearner(config, TINY_ENV, runtime)
    for model, head in ((learner.online, ONLINE_HEAD), (learner.target, TARGET_HEAD)):
        model.get_layer("torso_0").set_weights(IDENTITY_TORSO)
        model.get_layer("q_head").set_weights(head)
    return learner


def _weights(model):
    return [v.numpy().copy() for v in model.trainable_variables]


@pytest.mark.parametrize("double_dqn, expected", [(False, VANILLA_LOSS), (True, DOUBLE_LOSS)])
def test_one_gradient_step_by_hand(runtime, double_dqn, expected):
    learner = _hand_learner(runtime, double_dqn=double_dqn)
    before = _weights(learner.online)
    update = learner.update(ReplayBatch({k: v[None] for k, v in BATCH.items()}, update_target=False))
    assert update.metrics["loss"] == pytest.approx(expected, rel=1e-6)  # before the step
    assert update.metrics["q_mean"] == pytest.approx(3.0, rel=1e-6)
    assert int(learner.gradient_steps.numpy()) == 1
    if double_dqn:
        return
    # Vanilla: d loss / d theta = [-(0.75 * -0.5 + 0.25 * 1) / 2, -(0.25 * -1 + 0.25 * -1) / 2] = [0.0625, 0.25];
    # theta_0, theta_1 are head columns 2 and 3: their kernel gradients h * [0.0625, 0.25] > 0, the other columns
    # get none. dL/dh = 0.0625 * [0, 1] + 0.25 * [0, 2] = [0, 0.5625], so only the torso's column 1 moves.
    # Adam's first step is lr * sign(g), and nothing where g = 0.
    kernel, bias = before[2].copy(), before[3].copy()
    kernel[:, 2:] -= LR
    bias[2:] -= LR
    torso_kernel, torso_bias = before[0].copy(), before[1].copy()
    torso_kernel[:, 1] -= LR
    torso_bias[1] -= LR
    for got, want in zip(_weights(learner.online), [torso_kernel, torso_bias, kernel, bias]):
        np.testing.assert_allclose(got, want, atol=1e-6)
    for got, want in zip(update.weights, _weights(learner.online)):  # the actor gets the new weights
        np.testing.assert_array_equal(got, want)


def test_prioritized_replay_weights_the_rows_and_returns_each_rows_loss(runtime):
    learner = _hand_learner(runtime, prioritized_replay=True)
    batch = {**{k: v[None] for k, v in BATCH.items()}, "weight": np.array([[0.5]], np.float32)}
    update = learner.update(ReplayBatch(batch, update_target=False))
    assert update.metrics["loss"] == pytest.approx(0.5 * VANILLA_LOSS, rel=1e-6)
    np.testing.assert_allclose(update.row_errors, [[VANILLA_LOSS]], rtol=1e-6)  # the row's new priority


def test_the_policy_and_the_actor_answer_with_the_means_of_the_quantiles(runtime):
    # The hand learner's online Z(s) at s = [1, 2]: a0 [1, 3] (mean 2), a1 [2, 4] (mean 3); at s = [3, 1]:
    # a0 [3, 4] (mean 3.5), a1 [1, 2] (mean 1.5).
    learner = _hand_learner(runtime)
    obs = np.array([[1.0, 2.0], [3.0, 1.0]], np.float32)
    outputs = qrdqn_policy.serving_policy(learner.config, TINY_ENV, learner.online).outputs(tf.constant(obs))
    np.testing.assert_allclose(outputs["q_values"].numpy(), [[2.0, 3.0], [3.5, 1.5]])
    np.testing.assert_array_equal(outputs["action"].numpy(), [1, 0])
    mirror = qrdqn_policy.acting_mirror(learner.online)  # the NumPy mirror the epsilon-greedy actor calls
    np.testing.assert_allclose(mirror(obs), [[2.0, 3.0], [3.5, 1.5]])


def test_the_config_refuses_what_has_no_meaning():
    for bad, message in [({"num_quantiles": 0}, "num_quantiles must be >= 1"),
                         ({"num_quantiles": 10_001}, "at most 10000"),
                         ({"quantile_huber_kappa": 0.0}, "quantile_huber_kappa must be > 0"),
                         ({"dueling": True}, "no dueling form")]:
        with pytest.raises(ValueError, match=message):
            QRDQNConfig(**bad)


# --- a short run end to end --------------------------------------------------------------------------------------

HP = {"total_env_steps": 3000, "learning_starts": 500, "hidden_sizes": "32", "num_quantiles": 8, "batch_size": 32,
      "train_period_env_steps": 4, "gradient_steps_per_train": 2, "target_update_period_env_steps": 100,
      "epsilon_decay_fraction": 0.3, "eval_interval": 0, "final_eval_episodes": 5, "checkpoint_interval": 1000,
      "log_interval": 500}


def test_a_short_run_trains_resumes_exports_and_answers_as_its_quantiles_say(tmp_path):
    run_dir = tmp_path / "run"
    polls = []
    prepared = launch.prepare(launch.TrainRequest(agent="qrdqn", env="CartPole-v1", preset="none", hp=HP,
                                                  run_dir=run_dir))
    stopped = launch.execute(prepared, stop_requested=lambda: polls.append(1) or len(polls) > 1500)
    assert stopped.record["kind"] == "stopped" and stopped.record["env_step"] == 1500
    run = tfrl.train("qrdqn", "CartPole-v1", preset="none", hp=HP, run_dir=run_dir, verbose=0)
    assert run.complete and run.result["env_step"] == 3000
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "resume" for r in records)
    # (3000 - 500) / 4 + 1 = 626 train calls of 2 gradient steps
    assert run.result["gradient_steps"] == 626 * 2
    policy = serving.load(run.saved_model)
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    outputs = policy.outputs(obs)
    assert outputs["q_values"].shape == (16, 2)
    np.testing.assert_array_equal(outputs["action"], outputs["q_values"].argmax(axis=-1))
    # The exported Q-values are the means of the trained network's quantiles.
    np.testing.assert_array_equal(tfrl.load_policy(run_dir)(obs), outputs["action"])  # the run dir's export


def test_the_cli_lists_its_settings_and_refuses_what_dqn_has_and_it_has_not(tmp_path):
    assert "num_quantiles" in agents.hparam_names()
    with pytest.raises(UsageError, match="dueling"):
        tfrl.train("qrdqn", "CartPole-v1", preset="none", hp={**HP, "dueling": True}, run_dir=tmp_path / "x",
                   verbose=0)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_the_cartpole_preset_solves_cartpole(tmp_path):
    # qrdqn-cartpole (the zoo's settings, 50k env steps): 500 over the final evaluation's 100 episodes, seeds 0-4 of
    # benchmarks/compare.py --suite=qrdqn-cartpole; the kept policy is as good or better.
    run = tfrl.train("qrdqn", "CartPole-v1", run_dir=tmp_path / "run", verbose=0, hp={"eval_episodes": 10})
    assert run.result["return_mean"] >= 475, run.result


def test_the_memory_estimate_counts_the_pairwise_errors_of_one_batch_not_of_k():
    # qrdqn-lunarlander: K = 256 batches of 128 per call, 170 quantiles. The loss's [B, 170, 170] errors exist for
    # one batch at a time: 3 passes x 128 rows x 3 x 170^2 floats x 4 bytes = 133,171,200 bytes, not K times that
    # (34 GB, which refused the preset on a 24 GB machine). Against 1 quantile (3 passes x 128 x 3 x 1 x 4 = 4,608
    # bytes) the head also grows: 8 copies x 4 bytes x (256 + 1) x (4 x 170 - 4 x 1) = 5,559,424 bytes.
    from tfrl.agents.qrdqn.spec import estimate_memory
    from tfrl.config import apply_overrides
    from tfrl import presets

    preset = presets.find("qrdqn", ["LunarLander-v3"], "qrdqn-lunarlander-sb3zoo")
    config = apply_overrides(QRDQNConfig(), preset.hparams, "preset")
    info = EnvInfo(env_id="LunarLander-v3", obs_shape=(8,), num_actions=4)
    one_call = estimate_memory(config, info, "sync")["networks"]
    fewer_quantiles = estimate_memory(apply_overrides(config, {"num_quantiles": 1}, "test"), info, "sync")["networks"]
    assert one_call - fewer_quantiles == 133_171_200 - 4_608 + 5_559_424
    assert one_call < 1_000_000_000
