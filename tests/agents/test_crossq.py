"""Tests for CrossQ (tfrl.agents.crossq): batch renormalization by hand in both modes and its gradient, the joint
pass's statistics, an update against the same math in NumPy, the delayed actor, the NumPy mirror against the
actor, and a short run that trains, resumes, evaluates and exports."""

import json
import types

import numpy as np
import pytest
import tensorflow as tf

import tfrl
from tfrl.agents.crossq.batch_renorm import BatchRenorm
from tfrl.agents.crossq.config import CrossQConfig
from tfrl.agents.crossq.learning import CrossQLearner
from tfrl.agents.crossq.mirror import NumpyRenormActor
from tfrl.agents.sac.learning import squashed_gaussian
from tfrl.envs import EnvInfo
from tfrl.errors import UsageError
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import serving
from tfrl.run import launch

PENDULUM = EnvInfo(env_id="Pendulum-v1", obs_shape=(3,), num_actions=0, action_shape=(1,), action_low=(-2.0,),
                   action_high=(2.0,))
CPU = Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")


def _layer(warmup_steps, epsilon=0.0, momentum=0.99):
    layer = BatchRenorm(momentum=momentum, epsilon=epsilon, warmup_steps=warmup_steps)
    layer.build((None, 2))
    return layer


def test_before_warmup_it_is_batch_normalization_and_the_moving_statistics_follow():
    # x = [[1, 2], [3, 6]]: batch mean [2, 4], biased variance [1, 4], std [1, 2] -> y = [[-1, -1], [1, 1]].
    # moving mean 0.99 * 0 + 0.01 * [2, 4] = [0.02, 0.04]; moving variance 0.99 * 1 + 0.01 * [1, 4] = [1, 1.03]
    layer = _layer(warmup_steps=10)
    y = layer(tf.constant([[1.0, 2.0], [3.0, 6.0]]), training=True)
    np.testing.assert_allclose(y.numpy(), [[-1, -1], [1, 1]], atol=1e-6)
    np.testing.assert_allclose(layer.moving_mean.numpy(), [0.02, 0.04], rtol=1e-6)
    np.testing.assert_allclose(layer.moving_variance.numpy(), [1.0, 1.03], rtol=1e-6)
    assert float(layer.steps.numpy()) == 1.0


def test_after_warmup_r_and_d_renormalize_towards_the_moving_statistics_and_are_clipped():
    # Moving mean 0, variance 1 (std 1). Column 1: x [1, 3], mean 2, std 1: r = 1, d = 2:
    #   y = (x - 2) / 1 * 1 + 2 = [1, 3] (the moving statistics are the identity, so y = x)
    # Column 2: x [0, 20], mean 10, std 10: r = clip(10, 1/3, 3) = 3, d = clip(10, -5, 5) = 5:
    #   y = (x - 10) / 10 * 3 + 5 = [2, 8]
    layer = _layer(warmup_steps=0)
    y = layer(tf.constant([[1.0, 0.0], [3.0, 20.0]]), training=True)
    np.testing.assert_allclose(y.numpy(), [[1, 2], [3, 8]], rtol=1e-5)


def test_evaluation_mode_uses_the_moving_statistics_and_updates_nothing():
    layer = _layer(warmup_steps=0, epsilon=1e-3)
    layer.moving_mean.assign([1.0, -2.0])
    layer.moving_variance.assign([4.0, 0.25])
    layer.gamma.assign([2.0, 1.0])
    layer.beta.assign([0.5, 0.0])
    y = layer(tf.constant([[3.0, 0.0]]), training=False)
    # 2 * (3 - 1) / sqrt(4.001) + 0.5, (0 + 2) / sqrt(0.251)
    np.testing.assert_allclose(y.numpy(), [[2 * 2 / np.sqrt(4.001) + 0.5, 2 / np.sqrt(0.251)]], rtol=1e-6)
    np.testing.assert_allclose(layer.moving_mean.numpy(), [1.0, -2.0])
    assert float(layer.steps.numpy()) == 0.0


def test_the_gradient_flows_through_the_batch_statistics_but_not_through_r_and_d():
    # y = r (x - mu) / sigma + d with r, d constants: dL/dx = r / sigma * (g - mean(g) - xhat * mean(g * xhat)),
    # g = dL/dy. Moving variance 0.25 makes r = sigma / 0.5 (not clipped) != 1, so a gradient through r would show.
    layer = _layer(warmup_steps=0)
    layer.moving_variance.assign([0.25, 0.25])
    x = tf.constant([[-1.0, 0.0], [0.0, 1.0], [1.0, 5.0]])
    g = np.array([[1.0, 0.5], [0.0, -1.0], [2.0, 0.0]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(layer(x, training=True) * g)
    xn = x.numpy().astype(np.float64)
    sigma = xn.std(axis=0)
    xhat = (xn - xn.mean(axis=0)) / sigma
    r = np.clip(sigma / 0.5, 1 / 3, 3)
    expected = r / sigma * (g - g.mean(axis=0) - xhat * (g * xhat).mean(axis=0))
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_the_config_refuses_what_has_no_meaning():
    for bad, message in [({"target_update_tau": 0.005}, "CrossQ has no target networks"),
                         ({"policy_delay": 0}, "policy_delay must be >= 1"),
                         ({"adam_beta_1": 1.0}, r"adam_beta_1 must be in \[0, 1\)"),
                         ({"batch_norm_momentum": 1.0}, "batch_norm_momentum"),
                         ({"batch_norm_epsilon": 0.0}, "batch_norm_epsilon must be > 0"),
                         ({"critic_hidden_sizes": ()}, "critic_hidden_sizes must be positive"),
                         ({"batch_size": 1}, "batch_size must be >= 2")]:
        with pytest.raises(ValueError, match=message):
            CrossQConfig(**bad)
    with pytest.raises(UsageError, match="CrossQ trains on one device"):
        CrossQLearner.check_runtime(CrossQConfig(), types.SimpleNamespace(strategy=object()))


def _np_dense(layer, x, relu):
    kernel, bias = (v.numpy().astype(np.float64) for v in (layer.kernel, layer.bias))
    y = x @ kernel + bias
    return np.maximum(y, 0) if relu else y


def _np_batch_norm(x, epsilon):
    """Training mode before warmup (gamma 1, beta 0 as initialized): the batch's own statistics."""
    return (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + epsilon)


def _np_critic_in_training_mode(critic, obs, action, epsilon):
    x = _np_batch_norm(np.concatenate([obs, action], axis=1), epsilon)
    x = _np_batch_norm(_np_dense(critic.get_layer("torso_0"), x, relu=True), epsilon)
    return _np_dense(critic.get_layer("q_head"), x, relu=False)[:, 0]


def _batch(rows, seed=0):
    rng = np.random.default_rng(seed)
    b = {"obs": rng.normal(size=(rows, 3)), "action": rng.uniform(-1, 1, size=(rows, 1)),
         "reward": rng.normal(size=rows), "discount": np.where(np.arange(rows) % 3 == 1, 0.0, 0.99),
         "next_obs": rng.normal(size=(rows, 3)), "noise_next": rng.normal(size=(rows, 1)),
         "noise": rng.normal(size=(rows, 1))}
    return {name: value.astype(np.float32) for name, value in b.items()}


def test_an_update_normalizes_current_and_next_rows_together_and_reports_the_numpy_loss():
    config = CrossQConfig(hidden_sizes=(4,), critic_hidden_sizes=(8,), batch_size=4, initial_temperature=0.5)
    learner = CrossQLearner(config, PENDULUM, CPU)
    b = _batch(4)
    mean, log_std = np.split(learner.actor(b["next_obs"], training=False).numpy(), 2, axis=-1)
    next_action, next_log_prob = (t.numpy() for t in squashed_gaussian(mean, log_std, b["noise_next"]))
    joint_obs = np.concatenate([b["obs"], b["next_obs"]]).astype(np.float64)
    joint_action = np.concatenate([b["action"], next_action]).astype(np.float64)
    q = [_np_critic_in_training_mode(c, joint_obs, joint_action, config.batch_norm_epsilon) for c in learner.critics]
    y = b["reward"] + b["discount"] * (np.minimum(q[0][4:], q[1][4:]) - 0.5 * next_log_prob)
    loss = 0.5 * (np.mean((q[0][:4] - y) ** 2) + np.mean((q[1][:4] - y) ** 2))

    update = learner.update({name: value[None] for name, value in b.items()})
    assert update.metrics["critic_loss"] == pytest.approx(loss, rel=1e-4)
    assert update.metrics["q_mean"] == pytest.approx(0.5 * (q[0][:4].mean() + q[1][:4].mean()), rel=1e-4)
    # The critics' first layer saw the 8 joint rows once: its moving mean is 0.01 of their mean.
    first = learner.critics[0].get_layer("torso_renorm_0")
    joint_inputs = np.concatenate([joint_obs, joint_action], axis=1)
    np.testing.assert_allclose(first.moving_mean.numpy(), 0.01 * joint_inputs.mean(axis=0), rtol=1e-4, atol=1e-7)
    assert float(first.steps.numpy()) == 1.0
    # policy_delay 3: no actor step yet, so the actor's layers never ran in training mode, and no actor metrics.
    assert float(learner.actor.get_layer("torso_renorm_0").steps.numpy()) == 0.0
    assert "actor_loss" not in update.metrics and "actor_updates" not in update.metrics
    assert sorted(learner.checkpoint_items()) == sorted(
        ["actor", "q1", "q2", "log_alpha", "actor_optimizer", "critic_optimizer", "temperature_optimizer",
         "gradient_steps"])


def test_the_actor_and_temperature_step_every_policy_delay_steps():
    config = CrossQConfig(hidden_sizes=(4,), critic_hidden_sizes=(8,), batch_size=4, policy_delay=2)
    learner = CrossQLearner(config, PENDULUM, CPU)
    batches = [_batch(4, seed) for seed in range(5)]
    log_alpha = float(learner.log_alpha.numpy())
    update = learner.update({name: np.stack([b[name] for b in batches]) for name in batches[0]})
    # Steps 1..5: the actor steps after steps 2 and 4; the critics' layers ran 5 times, the actor's twice.
    assert float(learner.critics[1].get_layer("torso_renorm_1").steps.numpy()) == 5.0
    assert float(learner.actor.get_layer("torso_renorm_1").steps.numpy()) == 2.0
    assert float(learner.log_alpha.numpy()) != log_alpha
    assert {"actor_loss", "temperature_loss", "entropy"} <= set(update.metrics)
    assert all(np.isfinite(value) for value in update.metrics.values())


def test_the_numpy_mirror_acts_as_the_actor_in_evaluation_mode():
    config = CrossQConfig(hidden_sizes=(16, 16))
    learner = CrossQLearner(config, PENDULUM, CPU)
    rng = np.random.default_rng(3)
    for layer in learner.actor.layers:  # moving statistics and affine weights other than the initial ones
        if isinstance(layer, BatchRenorm):
            for variable in (layer.moving_mean, layer.beta):
                variable.assign(rng.normal(size=variable.shape))
            for variable in (layer.moving_variance, layer.gamma):
                variable.assign(rng.uniform(0.5, 2.0, size=variable.shape))
    mirror = NumpyRenormActor(learner.actor)
    mirror.update([v.numpy() for v in learner.acting_variables()])
    obs = rng.normal(size=(6, 3)).astype(np.float32)
    expected = np.split(learner.actor(obs, training=False).numpy(), 2, axis=-1)
    for got, want in zip(mirror(obs), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="weight arrays"):
        mirror.update([v.numpy() for v in learner.actor.trainable_variables])


HP = {"total_env_steps": 1200, "learning_starts": 300, "hidden_sizes": "32", "critic_hidden_sizes": "64",
      "batch_size": 64, "train_period_env_steps": 50, "gradient_steps_per_train": 50, "renorm_warmup_steps": 300,
      "eval_interval": 0, "final_eval_episodes": 2, "checkpoint_interval": 400, "log_interval": 400}


def test_a_short_run_trains_resumes_and_exports_a_box_policy(tmp_path):
    run_dir = tmp_path / "run"
    polls = []
    prepared = launch.prepare(launch.TrainRequest(agent="crossq", env="Pendulum-v1", preset="none", hp=HP,
                                                  run_dir=run_dir))
    stopped = launch.execute(prepared, stop_requested=lambda: polls.append(1) or len(polls) > 500)
    assert stopped.record["kind"] == "stopped" and stopped.record["env_step"] == 500
    run = tfrl.train("crossq", "Pendulum-v1", preset="none", hp=HP, run_dir=run_dir, verbose=0)
    assert run.complete and run.result["env_step"] == 1200
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {"kind": "resume", "env_step": 500} in records
    # train calls at 300, 350, ..., 1200: 19 calls of 50 gradient steps
    assert run.result["gradient_steps"] == 19 * 50
    train = [r for r in records if r["kind"] == "train"]
    assert train and all(np.isfinite(r["critic_loss"]) and np.isfinite(r["actor_loss"]) for r in train)
    policy = serving.load(run.saved_model)
    obs = np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32)
    actions = policy.policy(obs)
    assert actions.shape == (8, 1) and np.all(np.abs(actions) <= 2.0)
    np.testing.assert_allclose(tfrl.load_policy(run_dir)(obs), actions, rtol=1e-5)


@pytest.mark.slow
def test_the_pendulum_preset_swings_the_pendulum_up(tmp_path):
    # Random torques score about -1200 on Pendulum; crossq-pendulum reaches above -250 (docs/benchmarks.md).
    run = tfrl.train("crossq", "Pendulum-v1", run_dir=tmp_path / "run", verbose=0, hp={"final_eval_episodes": 20})
    assert run.result["return_mean"] > -250, run.result


def test_the_compiled_update_matches_the_uncompiled_one():
    config = CrossQConfig(hidden_sizes=(8,), critic_hidden_sizes=(16,), batch_size=8, policy_delay=2,
                          renorm_warmup_steps=1)
    batches = [_batch(8, seed) for seed in range(4)]
    transitions = {name: np.stack([b[name] for b in batches]) for name in batches[0]}
    updates = []
    for xla in (False, True):
        tf.keras.utils.set_random_seed(0)
        learner = CrossQLearner(config, PENDULUM, Runtime(options=RuntimeOptions(xla=xla),
                                                          device_name="/device:CPU:0"))
        updates.append((learner.update(transitions), [v.numpy() for v in learner.acting_variables()]))
    (plain, plain_weights), (compiled, compiled_weights) = updates
    for name, value in plain.metrics.items():
        assert compiled.metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name
    for a, b in zip(plain_weights, compiled_weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_checkpoint_keeps_the_moving_statistics_and_the_step_counts(tmp_path):
    from tfrl.run.checkpoints import Checkpointer

    config = CrossQConfig(hidden_sizes=(4,), critic_hidden_sizes=(8,), batch_size=4, policy_delay=1)
    learner = CrossQLearner(config, PENDULUM, CPU)
    learner.update({name: value[None] for name, value in _batch(4).items()})
    Checkpointer(tmp_path, learner.checkpoint_items()).save(1, {})
    fresh = CrossQLearner(config, PENDULUM, CPU)
    Checkpointer(tmp_path, fresh.checkpoint_items()).restore_latest()
    for model, restored in [(learner.actor, fresh.actor), *zip(learner.critics, fresh.critics)]:
        for variable, other in zip(model.weights, restored.weights):
            np.testing.assert_array_equal(variable.numpy(), other.numpy(), err_msg=variable.path)
    assert float(fresh.actor.get_layer("torso_renorm_0").steps.numpy()) == 1.0
    assert float(fresh.critics[0].get_layer("torso_renorm_0").moving_mean.numpy().any())
