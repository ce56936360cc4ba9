"""TD3: the target smoothing, the twin targets and the critic loss by hand; the delayed actor and target updates;
the NumPy mirror and the export; a run from the command line that trains, resumes and exports; a short learning
run (slow)."""

import json
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from fresh_process import MIRRORED_PENDULUM_PRELUDE, run_json_script

import tfrl
from tfrl.agents.td3 import policy as td3_policy
from tfrl.agents.td3.config import TD3Config
from tfrl.agents.td3.learning import TD3Learner, critic_loss, smoothed_target_actions, td_targets
from tfrl.envs import EnvInfo
from tfrl.errors import UsageError
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import export, serving
from tfrl.models.numpy_networks import NumpyDeterministicActor
from tfrl.run import training_loop

PENDULUM = EnvInfo("Pendulum-v1", (3,), 0, action_shape=(1,), action_low=(-2.0,), action_high=(2.0,))


def _runtime(**options):
    return Runtime(options=RuntimeOptions(**options), device_name="/device:CPU:0")


def test_target_smoothing_clips_the_noise_then_the_action():
    # noise std 0.2, clip 0.5: noise 3.0 -> 0.6 -> clipped to 0.5; 0.9 + 0.5 = 1.4 -> clipped to 1.0.
    # noise -0.1 -> -0.02 (inside the clip); -0.2 - 0.02 = -0.22. noise -4.0 -> -0.8 -> -0.5; -0.7 - 0.5 = -1.2 -> -1.
    actions = smoothed_target_actions(tf.constant([[0.9], [-0.2], [-0.7]]), tf.constant([[3.0], [-0.1], [-4.0]]),
                                      noise_std=0.2, noise_clip=0.5)
    np.testing.assert_allclose(actions.numpy(), [[1.0], [-0.22], [-1.0]], rtol=1e-6)


def test_the_targets_take_the_smaller_twin_and_the_loss_sums_both_critics():
    # y = r + discount * min(Q1', Q2'): 1 + 0.99 * min(5, 4) = 4.96; 0 + 0 * min(2, 3) = 0.
    targets = td_targets(tf.constant([1.0, 0.0]), tf.constant([0.99, 0.0]), tf.constant([5.0, 2.0]),
                         tf.constant([4.0, 3.0]))
    np.testing.assert_allclose(targets.numpy(), [4.96, 0.0], rtol=1e-6)
    # mse([1, 2] vs [1, 1]) = (0 + 1) / 2 = 0.5; mse([0, 2] vs [1, 1]) = (1 + 1) / 2 = 1; summed: 1.5.
    loss = critic_loss(tf.constant([1.0, 2.0]), tf.constant([0.0, 2.0]), tf.constant([1.0, 1.0]))
    assert float(loss) == pytest.approx(1.5)


def _batch(k, b, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(k, b, 3)).astype(np.float32),
            "action": rng.uniform(-1, 1, size=(k, b, 1)).astype(np.float32),
            "reward": rng.normal(size=(k, b)).astype(np.float32),
            "discount": rng.choice([0.0, 0.99], size=(k, b)).astype(np.float32),
            "next_obs": rng.normal(size=(k, b, 3)).astype(np.float32),
            "noise_next": rng.normal(size=(k, b, 1)).astype(np.float32)}


def _weights(model):
    return [v.numpy().copy() for v in model.trainable_variables]


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("xla", [False, True])
def test_the_actor_and_the_targets_move_on_every_second_gradient_step_only(xla):
    config = TD3Config(hidden_sizes=(16,), target_update_tau=0.5, policy_delay=2)
    learner = TD3Learner(config, PENDULUM, _runtime(xla=xla))
    actor, target, critic = _weights(learner.actor), _weights(learner.actor_target), _weights(learner.target_critics[0])
    first = learner.update(_batch(1, 8))  # gradient step 1: critics only
    assert _same(_weights(learner.actor), actor) and _same(_weights(learner.actor_target), target)
    assert _same(_weights(learner.target_critics[0]), critic) and not _same(_weights(learner.critics[0]), critic)
    assert "actor_loss" not in first.metrics and first.metrics["critic_loss"] > 0
    assert _same(first.weights, actor)  # the acting weights that come back are the actor's

    online_critic = _weights(learner.critics[0])
    second = learner.update(_batch(1, 8, seed=1))  # step 2: the critic, then the actor and every target
    new_actor = _weights(learner.actor)
    assert not _same(new_actor, actor) and _same(second.weights, new_actor)
    # Polyak with tau 0.5 after the critic's second step: target = 0.5 * Q1 (after step 2) + 0.5 * Q1_target (= its
    # start), and the actor's target = 0.5 * the new actor + 0.5 * the old one.
    for got, now, before in zip(_weights(learner.target_critics[0]), _weights(learner.critics[0]), critic):
        np.testing.assert_allclose(got, 0.5 * now + 0.5 * before, rtol=1e-6, atol=1e-7)
    for got, now, before in zip(_weights(learner.actor_target), new_actor, actor):
        np.testing.assert_allclose(got, 0.5 * now + 0.5 * before, rtol=1e-6, atol=1e-7)
    assert not _same(_weights(learner.critics[0]), online_critic)
    assert np.isfinite(second.metrics["actor_loss"]) and int(learner.gradient_steps.numpy()) == 2

    third = learner.update(_batch(3, 8, seed=2))  # steps 3-5 in one call: the actor moves at step 4
    assert int(learner.gradient_steps.numpy()) == 5 and "actor_loss" in third.metrics


def test_the_layer_init_and_adam_epsilon_reach_the_td3_and_sac_learners():
    """SB3's TD3 and SAC keep PyTorch's nn.Linear init and Adam epsilon 1e-8; Keras' defaults: Glorot, zero biases,
    1e-7. The targets start as copies of the online networks whatever the init."""
    from tfrl.agents.sac.config import SACConfig
    from tfrl.agents.sac.learning import SACLearner

    td3 = TD3Learner(TD3Config(hidden_sizes=(16,), layer_init="torch", adam_epsilon=1e-8), PENDULUM, _runtime())
    sac = SACLearner(SACConfig(hidden_sizes=(16,), layer_init="torch", adam_epsilon=1e-8), PENDULUM, _runtime())
    keras_default = TD3Learner(TD3Config(hidden_sizes=(16,)), PENDULUM, _runtime())
    for model in (td3.actor, td3.critics[0], sac.actor, sac.critics[1]):
        bias = model.get_layer("torso_0").get_weights()[1]
        fan_in = 3 if "actor" in model.name else 4  # Pendulum's 3 observations, and the action into a critic
        assert np.all(bias != 0) and np.abs(bias).max() <= 1 / np.sqrt(fan_in), model.name
    assert not np.any(keras_default.actor.get_layer("torso_0").get_weights()[1])
    for got, want in zip(td3.actor_target.get_weights(), td3.actor.get_weights()):
        np.testing.assert_array_equal(got, want)
    optimizers = (td3.actor_optimizer, td3.critic_optimizer, sac.actor_optimizer, sac.critic_optimizer,
                  sac.temperature_optimizer)
    assert [float(o.epsilon) for o in optimizers] == [1e-8] * 5
    assert float(keras_default.critic_optimizer.epsilon) == 1e-7


def test_the_actor_loss_is_minus_the_first_critic_of_the_actors_action():
    learner = TD3Learner(TD3Config(hidden_sizes=(16,), policy_delay=1), PENDULUM, _runtime())
    actor_before = keras.models.clone_model(learner.actor)
    actor_before.set_weights(learner.actor.get_weights())
    batch = _batch(1, 8, seed=3)
    update = learner.update(batch)
    # policy_delay 1: the critics step first, then the actor's loss is -mean(Q1(s, actor(s))) with the updated
    # Q1 and the actor as it was before its own step (the critics do not move again in this step).
    obs = batch["obs"][0]
    expected = -np.mean(learner.critics[0]([tf.constant(obs), actor_before(obs)]).numpy())
    assert update.metrics["actor_loss"] == pytest.approx(float(expected), rel=1e-5, abs=1e-6)


def test_the_numpy_mirror_and_the_export_act_like_the_actor(tmp_path):
    learner = TD3Learner(TD3Config(hidden_sizes=(16, 8)), PENDULUM, _runtime())
    obs = np.random.default_rng(2).normal(size=(32, 3)).astype(np.float32)
    squashed = learner.actor(obs).numpy()
    np.testing.assert_allclose(NumpyDeterministicActor(learner.actor)(obs), squashed, rtol=1e-5, atol=1e-6)
    policy = td3_policy.serving_policy(TD3Config(hidden_sizes=(16, 8)), PENDULUM, learner.actor)
    served = serving.load(export.export_saved_model(policy, [3], tmp_path, "td3", {})).outputs(obs)
    np.testing.assert_allclose(served["action"], -2 + (squashed + 1) * 2, rtol=1e-5, atol=1e-6)
    assert served["action"].shape == (32, 1) and set(served) == {"action"}


def test_bad_td3_settings_and_spaces_are_one_line(tmp_path):
    for hp, message in [({"policy_delay": 0}, "policy_delay must be >= 1, got 0"),
                        ({"target_noise_clip": -0.1}, "target_noise_clip must be >= 0, got -0.1")]:
        with pytest.raises(UsageError, match=message):
            tfrl.train("td3", "Pendulum-v1", hp=hp, run_dir=tmp_path / "bad", preset="none", verbose=0)
    with pytest.raises(UsageError, match="--agent=td3 acts in continuous action spaces; CartPole-v1 has Discrete"):
        tfrl.train("td3", "CartPole-v1", run_dir=tmp_path / "discrete", verbose=0)
    assert not (tmp_path / "bad").exists() and not (tmp_path / "discrete").exists()


def test_a_run_stops_resumes_exports_and_its_export_replays_the_final_evaluation(tmp_path):
    hp = {"total_env_steps": 1200, "learning_starts": 300, "hidden_sizes": [16], "batch_size": 32,
          "train_period_env_steps": 100, "gradient_steps_per_train": 100, "eval_interval": 0,
          "final_eval_episodes": 2, "checkpoint_interval": 600, "normalize_observations": True}
    first = tfrl.train("td3", "Pendulum-v1", hp={**hp, "total_env_steps": 600}, run_dir=tmp_path, preset="none",
                       verbose=0)
    assert first.complete and first.result["gradient_steps"] == 400  # calls at 300, 400, 500, 600: 4 x 100
    run = tfrl.train("td3", "Pendulum-v1", hp=hp, run_dir=tmp_path, preset="none", verbose=0)
    assert run.result["env_step"] == 1200 and run.result["gradient_steps"] == 1000  # 6 more calls, 700-1200
    replayed = run.evaluate(episodes=2, seed=training_loop.evaluation.FINAL_SEED_OFFSET)
    assert float(np.mean(replayed)) == pytest.approx(run.result["return_mean"], rel=1e-4)
    exported = tfrl.load_policy(run.saved_model)
    assert exported(np.zeros(3, np.float32)).shape == (1,)


@pytest.mark.slow
def test_the_pendulum_preset_swings_up():
    run = tfrl.train("td3", "Pendulum-v1", seed=0, verbose=0, export=False)
    # Random torques score about -1200; the zoo's settings reach about -150 at 20k env steps.
    assert run.result["return_mean"] > -400, run.result


@pytest.mark.parametrize("agent", ["td3", "sac"])
def test_mujoco_inverted_pendulum_picks_its_preset_and_a_short_run_exports(tmp_path, agent):
    # The preset's settings, cut to 1,500 env steps: checks the MuJoCo env, the preset found for it, the best
    # policy kept from the periodic evaluations, and the export (not the return: see docs/benchmarks.md).
    run = tfrl.train(agent, "InvertedPendulum-v5", hp={"total_env_steps": 1500, "learning_starts": 500,
                                                         "eval_interval": 500, "eval_episodes": 2,
                                                         "final_eval_episodes": 2},
                     run_dir=tmp_path, verbose=0)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["preset"] == f"{agent}-invertedpendulum" and config["hparams"]["keep_best_policy"] is True
    assert run.complete and run.result["gradient_steps"] == 64 * 16  # calls at 500, 564, ..., 1460
    assert tfrl.load_policy(run.saved_model)(np.zeros(4, np.float32)).shape == (1,)


def test_mirrored_on_two_logical_cpus_makes_the_single_device_update_with_the_delayed_actor():
    """TD3 under tf.distribute: MirroredStrategy on 2 logical CPUs, each replica half of every batch, gives the
    single-device update over 3 gradient steps (the actor and the targets move at step 2 only)."""
    code = MIRRORED_PENDULUM_PRELUDE + textwrap.dedent("""
        from tfrl.agents.td3.config import TD3Config
        from tfrl.agents.td3.learning import TD3Learner
        config = TD3Config(hidden_sizes=(8,), batch_size=8, learning_rate=3e-3, policy_delay=2, target_update_tau=0.5)
        rng = np.random.default_rng(0)
        k, b = 3, 8
        batch = {"obs": rng.normal(size=(k, b, 3)), "action": rng.uniform(-1, 1, (k, b, 1)),
                 "reward": rng.normal(size=(k, b)), "discount": np.full((k, b), 0.99),
                 "next_obs": rng.normal(size=(k, b, 3)), "noise_next": rng.normal(size=(k, b, 1))}
        batch = {name: value.astype(np.float32) for name, value in batch.items()}
        learners = [TD3Learner(config, env, runtime) for runtime in (single, mirrored)]
        pairs = [(learners[0].actor, learners[1].actor), (learners[0].actor_target, learners[1].actor_target)]
        pairs += list(zip(learners[0].critics + learners[0].target_critics, learners[1].critics + learners[1].target_critics))
        for source, copy in pairs:
            copy.set_weights(source.get_weights())
        start = [w.copy() for w in learners[0].actor.get_weights()]
        updates = [learner.update(batch) for learner in learners]
        diff = lambda a, b: max(float(np.abs(x - y).max()) for x, y in zip(a, b))
        print(json.dumps({
            "actor": diff(updates[0].weights, updates[1].weights),
            "critics": max(diff(s.get_weights(), c.get_weights()) for s, c in pairs[2:]),
            "actor_target": diff(pairs[1][0].get_weights(), pairs[1][1].get_weights()),
            "actor_moved": diff(start, learners[0].actor.get_weights()),
            "steps": [int(l.gradient_steps.numpy()) for l in learners],
            "copies": len(learners[1].actor.trainable_variables[0].value.values)}))
    """)
    result = run_json_script(code, timeout=300)
    assert result["copies"] == 2 and result["steps"] == [3, 3]
    assert result["actor_moved"] > 1e-4  # the comparison is not between two untouched actors
    assert result["actor"] < 1e-5 and result["critics"] < 1e-5 and result["actor_target"] < 1e-5
