"""Tests for the PPO learner: the clipped surrogate loss by hand, the minibatch orders, the update, the loop.

Expected numbers are worked out by hand in the comments. Learners are built on CPU:0 without
tfrl.hardware.runtime.apply(), so they leave the process's TF configuration alone.
"""

import dataclasses
import json
import math
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfrl import agents, config as config_lib, presets
from tfrl.agents.actor_critic.heads import CategoricalHead
from tfrl.agents.actor_critic.rollout import Rollout
from tfrl.agents.ppo.config import PPOConfig
from tfrl.agents.ppo.learning import PPOLearner, minibatch_indices, ppo_loss
from tfrl.envs import EnvInfo
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import numerics, serving
from tfrl.run import CONFIG_FILE, evaluation, runs, training_loop

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
LN2 = math.log(2.0)


def _runtime(**options) -> Runtime:
    return Runtime(options=RuntimeOptions(**options), device_name="/device:CPU:0")


def _train(learner, obs, actions, advantages, returns, old_log_probs, learning_rate, clip_range):
    """(metrics, weights) of one update on these rows, at this constant step size and clip range (set through the
    config the learner reads them from at each update)."""
    learner.config = dataclasses.replace(learner.config, learning_rate=learning_rate, lr_schedule="constant",
                                         clip_range=clip_range, clip_range_schedule="constant")
    update = learner.update(Rollout(obs, actions, advantages, returns, old_log_probs, 0))
    return update.metrics, update.weights


# --- the clipped surrogate: four rows, two actions, all with logits [0, 0] (pi = [1/2, 1/2]), epsilon = 0.2 ----
#
# row  action  pi_old(a)  r = pi/pi_old  A    r*A   clip(r)*A  min        |r-1| > 0.2
#  0     0       1/4         2          +1     2      1.2      1.2 (clip)    yes
#  1     1        1          1/2        -2    -1     -1.6     -1.6 (clip)    yes
#  2     0       1/2         1          +3     3      3        3             no
#  3     0       1/4         2          -1    -2     -1.2     -2 (r*A)       yes
# policy_loss = -mean(1.2, -1.6, 3, -2) = -0.6 / 4 = -0.15;  clip_fraction = 3/4
# approx_kl = mean((r - 1) - ln r) = ((1 - ln 2) + (-1/2 + ln 2) + 0 + (1 - ln 2)) / 4 = (1.5 - ln 2) / 4 = 0.2017132
# V = [1, 2, 3, 0], G = [2, 2, 5, 0]: value_loss = (1 + 0 + 4 + 0) / 4 = 1.25;  entropy = ln 2
# loss = -0.15 + 0.5 * 1.25 - 0.01 * ln 2 = 0.4680685

HEAD = CategoricalHead(2)
SURROGATE_CASE = dict(
    policy_params=tf.zeros([4, 2]), values=tf.constant([1.0, 2.0, 3.0, 0.0]), actions=tf.constant([0, 1, 0, 0]),
    advantages=tf.constant([1.0, -2.0, 3.0, -1.0]), returns=tf.constant([2.0, 2.0, 5.0, 0.0]),
    old_log_probs=tf.math.log(tf.constant([0.25, 1.0, 0.5, 0.25])),
)


def test_ppo_loss_terms_by_hand():
    loss, terms = ppo_loss(HEAD, **SURROGATE_CASE, clip_range=0.2, value_coef=0.5, entropy_coef=0.01)
    assert float(terms["policy_loss"]) == pytest.approx(-0.15, rel=1e-5)
    assert float(terms["value_loss"]) == pytest.approx(1.25, rel=1e-6)
    assert float(terms["entropy"]) == pytest.approx(LN2, rel=1e-6)
    assert float(terms["approx_kl"]) == pytest.approx((1.5 - LN2) / 4, rel=1e-5)
    assert float(terms["clip_fraction"]) == pytest.approx(0.75)
    assert float(loss) == pytest.approx(-0.15 + 0.625 - 0.01 * LN2, rel=1e-5)


def test_clipped_rows_give_no_policy_gradient_and_the_others_the_ratio_gradient():
    # d r / d logits = r * (onehot(a) - pi) = r * [1/2, -1/2] for a = 0 (pi = [1/2, 1/2]).
    # Rows 0 and 1 take the clipped (constant) branch: no gradient. Row 2: -(1/4) * A * r * [1/2, -1/2]
    # = -(3/4) * [1/2, -1/2] = [-0.375, 0.375]. Row 3, unclipped because r*A < clip(r)*A: -(1/4) * (-1) * 2 *
    # [1/2, -1/2] = [0.25, -0.25].
    logits = tf.Variable(tf.zeros([4, 2]))
    case = {**SURROGATE_CASE, "policy_params": logits}
    with tf.GradientTape() as tape:
        _, terms = ppo_loss(HEAD, **case, clip_range=0.2, value_coef=0.5, entropy_coef=0.0)
    gradient = tape.gradient(terms["policy_loss"], logits).numpy()
    np.testing.assert_allclose(gradient, [[0, 0], [0, 0], [-0.375, 0.375], [0.25, -0.25]], atol=1e-6)


def test_with_pi_old_equal_to_pi_every_ratio_is_one_and_the_loss_is_the_plain_policy_gradient():
    # With pi_old = pi every ratio is 1: policy_loss = -mean(A) and nothing is clipped.
    case = {**SURROGATE_CASE, "old_log_probs": tf.fill([4], -LN2)}
    _, terms = ppo_loss(HEAD, **case, clip_range=0.2, value_coef=0.5, entropy_coef=0.0)
    assert float(terms["policy_loss"]) == pytest.approx(-(1 - 2 + 3 - 1) / 4, rel=1e-6)
    assert (float(terms["clip_fraction"]), float(terms["approx_kl"])) == (0.0, 0.0)


def test_numpy_log_prob_matches_the_graph_and_survives_large_logits():
    logits = np.array([[math.log(3.0), 0.0], [1000.0, 0.0], [0.0, 0.0]], np.float32)
    actions = np.array([0, 1, 1], np.int32)
    expected = [math.log(0.75), -1000.0, -LN2]  # log softmax: ln 3/4; 0 - logsumexp(1000, 0) = -1000; ln 1/2
    np.testing.assert_allclose(HEAD.log_prob_numpy(logits, actions), expected, rtol=1e-6)
    np.testing.assert_allclose(HEAD.log_prob(tf.constant(logits), tf.constant(actions)), expected, rtol=1e-6)


# --- minibatch orders ------------------------------------------------------------------------------

def test_each_epoch_visits_every_row_once_in_its_own_order_and_the_orders_repeat_per_seed_and_update():
    indices = minibatch_indices(7, 3, n_epochs=3, rows=12, batch_size=4)
    assert indices.shape == (9, 4) and indices.dtype == np.int32  # 3 epochs x 12 / 4 minibatches
    epochs = indices.reshape(3, 12)
    for epoch in epochs:
        assert sorted(epoch.tolist()) == list(range(12))
    assert len({tuple(e) for e in epochs}) == 3  # fresh order per epoch
    np.testing.assert_array_equal(indices, minibatch_indices(7, 3, 3, 12, 4))
    assert not np.array_equal(indices, minibatch_indices(7, 4, 3, 12, 4))  # the next update
    assert not np.array_equal(indices, minibatch_indices(8, 3, 3, 12, 4))  # another seed


# --- the update ------------------------------------------------------------------------------------

TINY_ENV = EnvInfo(env_id="Tiny-v0", obs_shape=(3,), num_actions=2)


def _batch(rows: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return dict(obs=rng.normal(size=(rows, 3)).astype(np.float32), actions=rng.integers(0, 2, rows).astype(np.int32),
                advantages=rng.normal(size=rows).astype(np.float32), returns=rng.normal(size=rows).astype(np.float32),
                old_log_probs=np.log(rng.uniform(0.2, 0.8, rows)).astype(np.float32))


def _learner(seed: int = 0, runtime: Runtime | None = None, **overrides) -> PPOLearner:
    config = PPOConfig(**{"num_envs": 4, "rollout_length": 4, "batch_size": 16, "n_epochs": 1, "hidden_sizes": (8,),
                          "entropy_coef": 0.01, **overrides})
    return PPOLearner(config, TINY_ENV, runtime or _runtime(), seed=seed)


@pytest.mark.parametrize("n_epochs, batch_size", [(1, 16), (2, 8)])
def test_an_update_is_one_adam_step_per_minibatch_with_advantages_normalized_within_it(n_epochs, batch_size):
    learner = _learner(seed=5, n_epochs=n_epochs, batch_size=batch_size, max_grad_norm=0.5)
    batch = _batch(16)
    # The same steps by hand: a fresh copy of the network and Keras Adam with the config's epsilon and clip, one
    # step per minibatch in the orders minibatch_indices gives for (seed 5, update 0), each minibatch's
    # advantages standardized with that minibatch's own mean and std.
    reference = keras.models.clone_model(learner.network)
    reference.set_weights(learner.network.get_weights())
    optimizer = keras.optimizers.Adam(1e-3, epsilon=1e-5, global_clipnorm=0.5)
    expected = []
    for rows in minibatch_indices(5, 0, n_epochs, 16, batch_size):
        mb = {key: value[rows] for key, value in batch.items()}
        advantages = (mb["advantages"] - mb["advantages"].mean()) / (mb["advantages"].std() + 1e-8)
        with tf.GradientTape() as tape:
            policy_params, values = reference(mb["obs"])
            loss, terms = ppo_loss(learner.head, policy_params, values, mb["actions"], advantages, mb["returns"],
                                   mb["old_log_probs"], 0.1, value_coef=0.5, entropy_coef=0.01)
        optimizer.apply(tape.gradient(loss, reference.trainable_variables), reference.trainable_variables)
        expected.append({"loss": float(loss), **{name: float(value) for name, value in terms.items()}})

    metrics, weights = _train(learner, **batch, learning_rate=1e-3, clip_range=0.1)
    assert len(expected) == n_epochs * 16 // batch_size
    for name in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
        assert metrics[name] == pytest.approx(np.mean([e[name] for e in expected]), rel=1e-5, abs=1e-7), name
    assert metrics["clip_range"] == pytest.approx(0.1)
    assert 0 < metrics["clip_fraction"] < 1  # the old log-probs are random: some rows clip at 0.1, some not
    for got, want in zip(weights, reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert int(learner.updates.numpy()) == 1 and int(learner.optimizer.iterations.numpy()) == len(expected)


def test_an_update_makes_n_epochs_times_minibatches_steps_and_its_orders_follow_the_seed():
    batch = _batch(32)
    learners = [_learner(seed=seed, n_epochs=3, batch_size=8, num_envs=4, rollout_length=8) for seed in (0, 0, 1)]
    for learner in learners[1:]:
        learner.network.set_weights(learners[0].network.get_weights())
    results = [_train(learner, **batch, learning_rate=1e-3, clip_range=0.2)[1] for learner in learners]
    assert int(learners[0].optimizer.iterations.numpy()) == 3 * 32 // 8
    assert int(learners[0].updates.numpy()) == 1
    for a, b in zip(results[0], results[1]):
        np.testing.assert_array_equal(a, b)  # same seed: the same minibatch orders, bit for bit
    assert not all(np.array_equal(a, b) for a, b in zip(results[0], results[2]))  # another seed shuffles otherwise


def test_the_update_does_not_retrace_across_rollout_sizes_and_schedules():
    learner = _learner(batch_size=4)
    for rows, learning_rate, clip_range in ((16, 1e-3, 0.2), (8, 5e-4, 0.1), (32, 1e-7, 0.01)):
        batch = _batch(rows)
        _train(learner, **batch, learning_rate=learning_rate, clip_range=clip_range)  # the concrete function
        minibatches = minibatch_indices(0, 0, 1, rows, 4)
        packed = learner.rows.pack({"obs": batch["obs"], "action": batch["actions"], "advantage": batch["advantages"],
                                    "return": batch["returns"], "log_prob": batch["old_log_probs"]}, batch_dims=1)
        learner.train_step(*packed, minibatches, np.float32(learning_rate), np.float32(clip_range))
        learner.train_step(*packed, minibatches, learning_rate, clip_range)  # Python floats too
    assert learner.train_step.experimental_get_tracing_count() == 1


def test_a_rollout_that_does_not_split_into_minibatches_is_refused():
    with pytest.raises(ValueError, match="a rollout of 10 rows does not split into minibatches of 16"):
        _train(_learner(), **_batch(10), learning_rate=1e-3, clip_range=0.2)


def test_the_update_with_xla_matches_without():
    plain = _learner(n_epochs=2, batch_size=8)
    compiled = _learner(n_epochs=2, batch_size=8, runtime=_runtime(xla=True))
    compiled.network.set_weights(plain.network.get_weights())
    expected, expected_weights = _train(plain, **_batch(16), learning_rate=1e-3, clip_range=0.2)
    metrics, weights = _train(compiled, **_batch(16), learning_rate=1e-3, clip_range=0.2)
    for name in ("loss", "policy_loss", "value_loss", "entropy"):
        assert metrics[name] == pytest.approx(expected[name], rel=1e-4, abs=1e-6)
    for got, want in zip(weights, expected_weights):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_update_under_mixed_float16_uses_loss_scaling_and_float32_outputs():
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        learner = _learner(runtime=_runtime(mixed_precision="mixed_float16"))
        assert isinstance(learner.optimizer, keras.optimizers.LossScaleOptimizer)
        metrics, weights = _train(learner, **_batch(16), learning_rate=1e-3, clip_range=0.2)
        assert all(math.isfinite(metrics[name]) for name in ("loss", "policy_loss", "value_loss", "entropy"))
        assert all(w.dtype == np.float32 for w in weights)
    finally:
        keras.mixed_precision.set_global_policy(policy)


def test_a_nan_advantage_stops_the_update_naming_the_loss_and_the_minibatch_step():
    learner = _learner(n_epochs=2, batch_size=8)
    _train(learner, **_batch(16), learning_rate=1e-3, clip_range=0.2)  # update 1: 4 finite steps
    batch = _batch(16)
    # One NaN, in a row of the 2nd minibatch of update 2 (seed 0, update 1): standardized within that minibatch
    # it makes the loss and gradients NaN there. Steps count from 1 over the run: 4 + 2 = 6.
    batch["advantages"][minibatch_indices(0, 1, 2, 16, 8)[1][0]] = np.nan
    with pytest.raises(numerics.NonFiniteError) as raised:
        _train(learner, **batch, learning_rate=1e-3, clip_range=0.2)
    assert (raised.value.tensors, raised.value.gradient_step) == (["loss", "gradients"], 6)


def test_a_poisoned_value_weight_is_reported_as_non_finite_outputs():
    learner = _learner()
    kernel, bias = learner.network.get_layer("value_head").get_weights()
    kernel[0, 0] = np.inf
    learner.network.get_layer("value_head").set_weights([kernel, bias])
    with pytest.raises(numerics.NonFiniteError) as raised:
        _train(learner, **_batch(16), learning_rate=1e-3, clip_range=0.2)
    assert "policy logits or values" in raised.value.tensors and raised.value.gradient_step == 1


# --- config and presets ----------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    ({"batch_size": 48}, "num_envs \\* rollout_length = 2048 must be a multiple of batch_size = 48"),
    ({"clip_range": 0.0}, "clip_range must be > 0, got 0.0"),
    ({"n_epochs": 0}, "n_epochs must be > 0, got 0"),
    ({"clip_range_schedule": "cosine"}, "clip_range_schedule must be one of constant, linear, got 'cosine'"),
    ({"batch_size": 1}, "batch_size must be > 1 with normalize_advantage"),
])
def test_config_range_checks(overrides, message):
    with pytest.raises(ValueError, match=message):
        PPOConfig(**overrides)


@pytest.mark.parametrize("env_id, expected", [
    ("CartPole-v1", "ppo-cartpole"), ("LunarLander-v2", "ppo-lunarlander"), ("LunarLander-v3", "ppo-lunarlander"),
    ("InvertedPendulum-v5", "ppo-invertedpendulum"), ("HalfCheetah-v5", "ppo-halfcheetah-sb3zoo"),
])
def test_presets_load_and_auto_pick_the_tuned_one(env_id, expected):
    preset = presets.find("ppo", env_id, dirs=[REPO_ROOT / "tfrl" / "presets"])
    assert preset.name == expected
    config_lib.apply_overrides(PPOConfig(), preset.hparams, preset.name)  # raises on a bad key or value


def test_lunarlander_preset_is_the_zoo_settings():
    preset = presets.load_file(REPO_ROOT / "tfrl" / "presets" / "ppo-lunarlander.json")
    config = config_lib.apply_overrides(PPOConfig(), preset.hparams, preset.name)
    assert (config.num_envs, config.rollout_length, config.batch_size, config.n_epochs) == (16, 1024, 64, 4)
    assert (config.gamma, config.gae_lambda, config.entropy_coef, config.total_env_steps) == (0.999, 0.98, 0.01,
                                                                                               1_000_000)
    assert (config.learning_rate, config.clip_range, config.adam_epsilon, config.max_grad_norm) == (3e-4, 0.2, 1e-5, 0.5)


def test_mujoco_inverted_pendulum_picks_tfrls_preset_and_a_short_run_exports(tmp_path):
    # tfrl's preset: the zoo's settings for 100k env steps, keeping the best of evaluations every 10k.
    own = presets.find("ppo", "InvertedPendulum-v5", dirs=[REPO_ROOT / "tfrl" / "presets"])
    zoo = presets.find("ppo", "InvertedPendulum-v5", name="ppo-invertedpendulum-sb3zoo",
                       dirs=[REPO_ROOT / "tfrl" / "presets"])
    assert own.hparams == {**zoo.hparams, "total_env_steps": 100_000, "eval_interval": 10_000, "eval_episodes": 10,
                           "keep_best_policy": True}
    # Cut to 640 env steps: 20 rollouts of 32 transitions from 1 env, each 5 epochs of one minibatch (SB3 makes
    # the zoo's batch_size 64 the whole rollout of 32), so 100 gradient steps.
    import tfrl

    run = tfrl.train("ppo", "InvertedPendulum-v5", hp={"total_env_steps": 640, "eval_interval": 320,
                                                        "eval_episodes": 2, "final_eval_episodes": 2},
                     run_dir=tmp_path, verbose=0)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["preset"] == "ppo-invertedpendulum" and config["hparams"]["keep_best_policy"] is True
    assert run.complete and run.result["updates"] == 20 and run.result["gradient_steps"] == 100
    assert tfrl.load_policy(run.saved_model)(np.zeros(4, np.float32)).shape == (1,)


# --- the loop --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_loop_learns_cartpole_and_logs_the_ppo_metrics(tmp_path):
    # 48 updates of 256 rows, 4 epochs of 4 minibatches each. Random actions score ~22.
    config = PPOConfig(total_env_steps=12_288, num_envs=8, rollout_length=32, batch_size=64, n_epochs=4,
                       learning_rate=1e-3, gamma=0.98, gae_lambda=0.8, eval_interval=0, final_eval_episodes=10,
                       log_interval=4096, checkpoint_interval=0)
    final = training_loop.train(agents.get("ppo"), config, "CartPole-v1", 0, _runtime(), tmp_path,
                                training_loop.LoopOptions(progress_bar=False))
    assert final["kind"] == "final_eval" and final["env_step"] == 12_288 and final["updates"] == 48
    assert final["gradient_steps"] == 48 * 4 * 4
    assert final["return_mean"] > 100, final
    # The checkpoint loads as an exportable policy (tfrl.agents.actor_critic.policy) that replays the final evaluation.
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"agent": "ppo", "env_id": "CartPole-v1", "seed": 0,
                                                          "hparams": {}}))
    loaded = runs.load_policy(tmp_path)
    assert loaded.env_step == 12_288
    policy = serving.traced_policy(loaded.policy, loaded.env.obs_shape)
    replayed = evaluation.evaluate(policy, "CartPole-v1", 10, seed=evaluation.FINAL_SEED_OFFSET)
    assert float(replayed.mean()) == pytest.approx(final["return_mean"])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["kind"] == "train"]
    assert [r["env_step"] for r in train_records] == [4096, 8192, 12288]
    for record in train_records:
        assert record["clip_range"] == 0.2 and record["updates"] in (16, 32, 48)
        assert 0 <= record["clip_fraction"] <= 1 and record["approx_kl"] >= 0 and math.isfinite(record["loss"])
