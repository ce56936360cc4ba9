"""Continuous actions in A2C and PPO: the Gaussian head by hand, the NumPy mirror, clipping, the export and a
short Pendulum run."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfrl import agents
from tfrl.agents.actor_critic.heads import GaussianHead, make_head
from tfrl.agents.actor_critic.networks import make_network
from tfrl.agents.actor_critic.policy import serving_policy
from tfrl.agents.ppo.config import PPOConfig
from tfrl.envs import EnvInfo
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import export, numpy_networks, serving
from tfrl.run import evaluation, runs, training_loop

PENDULUM = EnvInfo("Pendulum-v1", (3,), 0, action_shape=(1,), action_low=(-2.0,), action_high=(2.0,))
LN2PI = math.log(2 * math.pi)


def test_gaussian_log_prob_and_entropy_by_hand():
    head = GaussianHead((2,), [-1, -1], [1, 1])
    params = tf.constant([[0.0, 1.0, 0.0, math.log(2.0)]])  # mean [0, 1], std [1, 2]
    actions = tf.constant([[1.0, 1.0]])
    # z = ((1 - 0) / 1, (1 - 1) / 2) = (1, 0)
    # log pi = (-0.5 * 1 - 0 - 0.5 ln 2pi) + (-0.5 * 0 - ln 2 - 0.5 ln 2pi) = -0.5 - ln 2 - ln 2pi
    expected = -0.5 - math.log(2.0) - LN2PI
    assert float(head.log_prob(params, actions)[0]) == pytest.approx(expected, rel=1e-6)
    assert float(head.log_prob_numpy(params.numpy(), actions.numpy())[0]) == pytest.approx(expected, rel=1e-6)
    # H = sum_d 0.5 + 0.5 ln 2pi + log std_d = 1 + ln 2pi + ln 2
    assert float(head.entropy(params)[0]) == pytest.approx(1 + LN2PI + math.log(2.0), rel=1e-6)
    assert head.action_spec.shape.as_list() == [None, 2] and head.num_params == 4


def test_samples_are_unclipped_the_env_gets_them_clipped_and_the_mode_is_the_mean():
    head = GaussianHead((1,), [-2], [2])
    params = np.array([[1.5, math.log(3.0)]] * 4000, np.float32)
    samples = head.sample(np.random.default_rng(0), params)
    assert samples.shape == (4000, 1) and samples.dtype == np.float32
    assert samples.mean() == pytest.approx(1.5, abs=0.15) and samples.std() == pytest.approx(3.0, rel=0.05)
    assert samples.max() > 2.0  # the sample itself is unbounded (the loss sees it) ...
    clipped = head.env_action(samples)
    assert clipped.max() == 2.0 and clipped.min() == -2.0  # ... the env gets it clipped to the Box
    np.testing.assert_array_equal(head.mode(params[:2]), [[1.5], [1.5]])


def test_the_numpy_mirror_carries_the_log_std_and_the_export_acts_like_the_live_network(tmp_path):
    head = make_head(PENDULUM)
    network = make_network(PPOConfig(hidden_sizes=(16,)), PENDULUM, head)
    log_std = network.get_layer("log_std")
    log_std.set_weights([np.array([-0.7], np.float32)])
    mirror = numpy_networks.NumpyActorCritic(network)
    obs = np.random.default_rng(1).normal(size=(64, 3)).astype(np.float32) * 3
    params, values = network(obs)
    mirror_params, mirror_values = mirror(obs)
    np.testing.assert_allclose(mirror_params, params.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mirror_values, values.numpy(), rtol=1e-5, atol=1e-6)
    assert np.all(mirror_params[:, 1] == np.float32(-0.7))
    network.get_layer("policy_head").set_weights([w * 300 for w in network.get_layer("policy_head").get_weights()])
    policy = serving_policy(PPOConfig(hidden_sizes=(16,)), PENDULUM, network)
    version_dir = export.export_saved_model(policy, [3], tmp_path, "pendulum", {"env_id": "Pendulum-v1"})
    served = serving.load(version_dir)
    outputs = served.outputs(obs)
    live_mean = network(obs)[0].numpy()[:, :1]
    assert outputs["action"].dtype == np.float32 and outputs["action"].shape == (64, 1)
    np.testing.assert_allclose(outputs["action"], np.clip(live_mean, -2, 2), rtol=1e-5, atol=1e-6)
    assert np.abs(live_mean).max() > 2  # the scaled head makes some means leave the Box: the export clips them
    np.testing.assert_allclose(outputs["log_std"], -0.7, rtol=1e-6)


@pytest.mark.slow
def test_a_short_pendulum_run_learns_and_exports_a_box_policy(tmp_path):
    keras.utils.set_random_seed(0)
    config = PPOConfig(total_env_steps=65_536, num_envs=4, rollout_length=1024, batch_size=64, n_epochs=10,
                       gamma=0.9, gae_lambda=0.95, learning_rate=1e-3, eval_interval=0, final_eval_episodes=10,
                       log_interval=16_384, checkpoint_interval=0)
    runtime = Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")
    final = training_loop.train(agents.get("ppo"), config, "Pendulum-v1", 0, runtime, tmp_path,
                                training_loop.LoopOptions(progress_bar=False))
    # Random torques score about -1200 on Pendulum; 16 updates of the zoo's settings bring it well above.
    assert final["return_mean"] > -800, final
    runs.write_config(tmp_path, runs.RunRecord("ppo", "Pendulum-v1", 0, config, env_info=PENDULUM.to_dict()))
    version_dir = runs.export_run(tmp_path, tmp_path / "models", "pendulum")
    metadata = export.read_metadata(version_dir)
    assert metadata["action_space"] == {"type": "Box", "shape": [1], "low": [-2.0], "high": [2.0]}
    replayed = evaluation.evaluate(serving.load(version_dir).policy, "Pendulum-v1", 10,
                                   seed=evaluation.FINAL_SEED_OFFSET)
    assert float(replayed.mean()) == pytest.approx(final["return_mean"], rel=1e-4)
