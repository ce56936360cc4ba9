"""SAC (tfrl.agents.sac): the squashed-Gaussian log-prob and the losses by hand, the temperature's direction, one
update against the same steps done by hand with Keras' Adam, the export, a resumed run and a short Pendulum run."""

import math

import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from fresh_process import MIRRORED_PENDULUM_PRELUDE, run_json_script

from tfrl import agents
from tfrl.agents.sac import policy as sac_policy
from tfrl.agents.sac.config import SACConfig
from tfrl.models import export, serving
from tfrl.models.numpy_networks import NumpySquashedActor
from tfrl.run import evaluation, runs, training_loop
from tfrl.agents.sac.learning import (SACLearner, actor_loss, critic_loss, soft_td_targets,
                                      squashed_gaussian, temperature_loss)
from tfrl.envs import EnvInfo
from tfrl.hardware.runtime import Runtime, RuntimeOptions

PENDULUM = EnvInfo("Pendulum-v1", (3,), 0, action_shape=(1,), action_low=(-2.0,), action_high=(2.0,))
LN2PI = math.log(2 * math.pi)


def _runtime(**options):
    return Runtime(options=RuntimeOptions(**options), device_name="/device:CPU:0")


def test_the_squashed_gaussian_log_prob_by_hand():
    # mean 0.5, log std ln 0.5 (std 0.5), noise 1: u = 0.5 + 0.5 * 1 = 1, a = tanh(1) = 0.7615942
    # log N(u) = -0.5 * 1^2 - ln 0.5 - 0.5 ln 2pi = -0.5 + 0.6931472 - 0.9189385 = -0.7257913
    # log(1 - tanh(1)^2) = -2 log cosh(1) = -2 * 0.4337808 = -0.8675617  ->  log pi = -0.7257913 + 0.8675617 = 0.1417704
    action, log_prob = squashed_gaussian(tf.constant([[0.5]]), tf.constant([[math.log(0.5)]]), tf.constant([[1.0]]))
    assert float(action[0, 0]) == pytest.approx(math.tanh(1.0), rel=1e-6)
    assert float(log_prob[0]) == pytest.approx(0.1417704, rel=1e-5)
    # Far in the tail the stable form stays finite where log(1 - tanh(u)^2) of float32 would give -inf.
    _, tail = squashed_gaussian(tf.constant([[30.0]]), tf.constant([[0.0]]), tf.constant([[0.0]]))
    assert np.isfinite(float(tail[0])) and float(tail[0]) == pytest.approx(-0.5 * LN2PI - 2 * (math.log(2) - 30.0),
                                                                           rel=1e-5)
    # log std beyond [-20, 2] is clipped: log std 5 acts as 2.
    _, clipped = squashed_gaussian(tf.constant([[0.0]]), tf.constant([[5.0]]), tf.constant([[0.0]]))
    assert float(clipped[0]) == pytest.approx(-2.0 - 0.5 * LN2PI, rel=1e-6)


def test_the_losses_by_hand():
    # y = r + discount * (min(Q1', Q2') - alpha * log pi') = [1 + 0.9 * (2 - 0.5 * -1), 0 + 0 * (...)] = [3.25, 0]
    targets = soft_td_targets(tf.constant([1.0, 0.0]), tf.constant([0.9, 0.0]), tf.constant([2.0, 5.0]),
                              tf.constant([3.0, 4.0]), tf.constant([-1.0, 2.0]), 0.5)
    np.testing.assert_allclose(targets.numpy(), [3.25, 0.0], rtol=1e-6)
    # 0.5 * (mean([(3 - 3.25)^2, (1 - 0)^2]) + mean([(4 - 3.25)^2, (0 - 0)^2])) = 0.5 * (0.53125 + 0.28125) = 0.40625
    assert float(critic_loss(tf.constant([3.0, 1.0]), tf.constant([4.0, 0.0]), targets)) == pytest.approx(0.40625)
    # mean(alpha log pi - min Q) = mean([0.5 * -1 - 2, 0.5 * 2 - 1]) = mean([-2.5, 0]) = -1.25
    assert float(actor_loss(tf.constant([-1.0, 2.0]), tf.constant([2.0, 1.0]), tf.constant([3.0, 4.0]), 0.5)) == -1.25


@pytest.mark.parametrize("log_prob, moves", [(2.0, "up"), (-3.0, "down")])
def test_the_temperature_rises_while_the_entropy_is_below_its_target(log_prob, moves):
    # Target entropy -1. log pi = 2: entropy -2 < -1, too little exploration: alpha must rise.
    # log pi = -3: entropy 3 > -1: alpha must fall. d loss / d log_alpha = -(log pi + target) = -(log pi - 1).
    log_alpha = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        loss = temperature_loss(log_alpha, tf.constant([log_prob]), target_entropy=-1.0)
    gradient = float(tape.gradient(loss, log_alpha))
    assert gradient == pytest.approx(-(log_prob - 1.0))
    keras.optimizers.SGD(0.1).apply([tf.constant(gradient)], [log_alpha])
    assert (float(log_alpha.numpy()) > 0) == (moves == "up")


def _batch(k, b, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(k, b, 3)).astype(np.float32),
            "action": rng.uniform(-1, 1, size=(k, b, 1)).astype(np.float32),
            "reward": rng.normal(size=(k, b)).astype(np.float32),
            "discount": rng.choice([0.0, 0.99], size=(k, b)).astype(np.float32),
            "next_obs": rng.normal(size=(k, b, 3)).astype(np.float32),
            "noise_next": rng.normal(size=(k, b, 1)).astype(np.float32),
            "noise": rng.normal(size=(k, b, 1)).astype(np.float32)}


def _reference_steps(learner, batch, config):
    """The same K steps as SACLearner, written out with fresh copies of its networks and Keras' Adam."""
    clone = lambda model: keras.models.clone_model(model)  # noqa: E731
    actor, critics, targets = clone(learner.actor), [clone(c) for c in learner.critics], [clone(t) for t in learner.target_critics]
    for copy, model in [(actor, learner.actor), *zip(critics, learner.critics), *zip(targets, learner.target_critics)]:
        copy.set_weights(model.get_weights())
    log_alpha = tf.Variable(float(learner.log_alpha.numpy()))
    adam = [keras.optimizers.Adam(config.learning_rate) for _ in range(3)]
    critic_vars = [v for c in critics for v in c.trainable_variables]

    def policy(obs, noise):
        mean, log_std = tf.split(actor(obs), 2, axis=-1)
        return squashed_gaussian(mean, log_std, noise)

    for k in range(len(batch["reward"])):
        b = {name: tf.constant(value[k]) for name, value in batch.items()}
        alpha = tf.exp(log_alpha)
        _, log_prob = policy(b["obs"], b["noise"])
        next_action, next_log_prob = policy(b["next_obs"], b["noise_next"])
        y = soft_td_targets(b["reward"], b["discount"], targets[0]([b["next_obs"], next_action]),
                            targets[1]([b["next_obs"], next_action]), next_log_prob, alpha)
        with tf.GradientTape(persistent=True) as tape:
            loss = critic_loss(critics[0]([b["obs"], b["action"]]), critics[1]([b["obs"], b["action"]]), y)
            t_loss = temperature_loss(log_alpha, log_prob, -1.0)
        adam[1].apply(tape.gradient(loss, critic_vars), critic_vars)
        adam[2].apply(tape.gradient(t_loss, [log_alpha]), [log_alpha])
        with tf.GradientTape() as tape:
            action, log_prob = policy(b["obs"], b["noise"])
            a_loss = actor_loss(log_prob, critics[0]([b["obs"], action]), critics[1]([b["obs"], action]), alpha)
        adam[0].apply(tape.gradient(a_loss, actor.trainable_variables), actor.trainable_variables)
        for target, critic in zip(targets, critics):
            for tv, v in zip(target.trainable_variables, critic.trainable_variables):
                tv.assign(0.005 * v + 0.995 * tv)
    return actor, critics, targets, log_alpha


@pytest.mark.parametrize("xla", [False, True])
def test_an_update_is_the_hand_written_steps_with_keras_adam(xla):
    keras.utils.set_random_seed(0)  # the networks' initial weights, whatever ran before
    config = SACConfig(hidden_sizes=(8,), batch_size=16, learning_rate=3e-3, initial_temperature=0.5)
    learner = SACLearner(config, PENDULUM, _runtime(xla=xla))
    batch = _batch(3, 16)
    actor, critics, targets, log_alpha = _reference_steps(learner, batch, config)
    update = learner.update(batch)
    for got, want in zip(update.weights, actor.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    for model, reference in [*zip(learner.critics, critics), *zip(learner.target_critics, targets)]:
        for got, want in zip(model.get_weights(), reference.get_weights()):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert float(learner.log_alpha.numpy()) == pytest.approx(float(log_alpha.numpy()), rel=1e-5, abs=1e-6)
    assert int(learner.gradient_steps.numpy()) == 3
    assert set(update.metrics) == {"critic_loss", "actor_loss", "temperature", "temperature_loss", "entropy",
                                   "q_mean"}
    # alpha before each step's update: 0.5, then lower while the entropy is above its target (-1), else higher.
    assert (update.metrics["temperature"] < 0.5) == (update.metrics["entropy"] > -1.0), update.metrics


def test_a_fixed_temperature_stays_and_a_poisoned_critic_is_reported():
    from tfrl.models import numerics

    learner = SACLearner(SACConfig(hidden_sizes=(8,), batch_size=8, learn_temperature=False), PENDULUM, _runtime())
    learner.update(_batch(2, 8))
    assert float(learner.log_alpha.numpy()) == 0.0
    head = learner.critics[0].get_layer("q_head")
    kernel, bias = head.get_weights()
    head.set_weights([kernel * np.inf, bias])
    with pytest.raises(numerics.NonFiniteError) as raised:
        learner.update(_batch(2, 8, seed=1))
    assert raised.value.gradient_step == 3


def test_the_export_and_the_numpy_mirror_act_like_the_live_actor(tmp_path):
    learner = SACLearner(SACConfig(hidden_sizes=(16,)), PENDULUM, _runtime())
    obs = np.random.default_rng(2).normal(size=(32, 3)).astype(np.float32)
    mean, log_std = np.split(learner.actor(obs).numpy(), 2, axis=-1)
    mirror_mean, mirror_log_std = NumpySquashedActor(learner.actor)(obs)
    np.testing.assert_allclose(mirror_mean, mean, rtol=1e-5, atol=1e-6)
    policy = sac_policy.serving_policy(SACConfig(hidden_sizes=(16,)), PENDULUM, learner.actor)
    version_dir = export.export_saved_model(policy, [3], tmp_path, "sac", {})
    served = serving.load(version_dir).outputs(obs)
    np.testing.assert_allclose(served["action"], -2 + (np.tanh(mean) + 1) * 2, rtol=1e-5, atol=1e-6)
    assert served["action"].shape == (32, 1) and served["action"].dtype == np.float32


@pytest.mark.slow
def test_a_short_pendulum_run_learns_resumes_and_exports(tmp_path):
    keras.utils.set_random_seed(0)
    config = SACConfig(total_env_steps=6000, learning_rate=1e-3, hidden_sizes=(64, 64), batch_size=128,
                       train_period_env_steps=50, gradient_steps_per_train=50, eval_interval=0,
                       final_eval_episodes=5, log_interval=1000, checkpoint_interval=2000)
    runtime = _runtime()
    polls = []
    stopped = training_loop.train(agents.get("sac"), config, "Pendulum-v1", 0, runtime, tmp_path, training_loop.LoopOptions(
        progress_bar=False, stop_requested=lambda: polls.append(1) or len(polls) > 2500))
    assert stopped["kind"] == "stopped" and stopped["env_step"] == 2500
    final = training_loop.train(agents.get("sac"), config, "Pendulum-v1", 0, runtime, tmp_path,
                                training_loop.LoopOptions(progress_bar=False))
    assert final["env_step"] == 6000 and final["gradient_steps"] == 50 * 119  # calls at 100 (learning_starts), 150, ..., 6000
    # Random torques score about -1200; 6000 gradient steps of SAC swing the pendulum up.
    assert final["return_mean"] > -500, final
    runs.write_config(tmp_path, runs.RunRecord("sac", "Pendulum-v1", 0, config, env_info=PENDULUM.to_dict()))
    version_dir = runs.export_run(tmp_path, tmp_path / "models", "pendulum")
    replayed = evaluation.evaluate(serving.load(version_dir).policy, "Pendulum-v1", 5, seed=evaluation.FINAL_SEED_OFFSET)
    assert float(replayed.mean()) == pytest.approx(final["return_mean"], rel=1e-4)


def test_mirrored_on_two_logical_cpus_makes_the_single_device_update():
    code = MIRRORED_PENDULUM_PRELUDE + textwrap.dedent("""
        from tfrl.agents.sac.config import SACConfig
        from tfrl.agents.sac.learning import SACLearner
        config = SACConfig(hidden_sizes=(8,), batch_size=8, learning_rate=3e-3)
        rng = np.random.default_rng(0)
        k, b = 2, 8
        batch = {"obs": rng.normal(size=(k, b, 3)), "action": rng.uniform(-1, 1, (k, b, 1)),
                 "reward": rng.normal(size=(k, b)), "discount": np.full((k, b), 0.99),
                 "next_obs": rng.normal(size=(k, b, 3)), "noise_next": rng.normal(size=(k, b, 1)),
                 "noise": rng.normal(size=(k, b, 1))}
        batch = {name: value.astype(np.float32) for name, value in batch.items()}
        learners = [SACLearner(config, env, runtime) for runtime in (single, mirrored)]
        for model_name in ("actor",):
            learners[1].actor.set_weights(learners[0].actor.get_weights())
        for i in range(2):
            learners[1].critics[i].set_weights(learners[0].critics[i].get_weights())
            learners[1].target_critics[i].set_weights(learners[0].target_critics[i].get_weights())
        updates = [learner.update(batch) for learner in learners]
        print(json.dumps({"diff": max(float(np.abs(a - b).max()) for a, b in zip(updates[0].weights, updates[1].weights)),
                          "alpha": [float(l.log_alpha.numpy()) for l in learners],
                          "copies": len(learners[1].actor.trainable_variables[0].value.values)}))
    """)
    result = run_json_script(code, timeout=300)
    assert result["copies"] == 2 and result["diff"] < 1e-5
    assert result["alpha"][0] == pytest.approx(result["alpha"][1], abs=1e-6)
