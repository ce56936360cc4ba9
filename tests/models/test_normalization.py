"""Observation normalization and reward scaling (tfrl.models.normalization): the statistics by hand, the layer against
NumPy, checkpoints, resume, and the export taking raw observations."""

import math

import keras
import numpy as np
import pytest

from tfrl import agents
from tfrl.agents.actor_critic.heads import make_head
from tfrl.agents.actor_critic.networks import make_network
from tfrl.agents.actor_critic.policy import serving_policy
from tfrl.agents.ppo.config import PPOConfig
from tfrl.agents.sac.config import SACConfig
from tfrl.envs import EnvInfo
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import export, normalization, running_stats, serving
from tfrl.run import checkpoints, evaluation, runs, training_loop

PENDULUM = EnvInfo("Pendulum-v1", (3,), 0, action_shape=(1,), action_low=(-2.0,), action_high=(2.0,))
C = running_stats.INITIAL_COUNT


def _runtime():
    return Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")


def test_running_mean_and_variance_by_hand():
    stats = running_stats.RunningMeanStd((1,))
    stats.update(np.array([[1.0], [3.0]]))
    # The prior (mean 0, var 1, weight C) merged with the batch (mean 2, var 1, 2 rows):
    # mean = 2 * 2 / (2 + C); M2 = 1 * C + 1 * 2 + 2^2 * C * 2 / (2 + C); var = M2 / (2 + C)
    assert stats.mean[0] == pytest.approx(4 / (2 + C), rel=1e-12)
    assert stats.var[0] == pytest.approx((C + 2 + 8 * C / (2 + C)) / (2 + C), rel=1e-12)
    assert stats.count == pytest.approx(2 + C)
    stats.update(np.array([[5.0]]))
    # Three rows 1, 3, 5: mean 3, variance 8/3 (the prior's weight is 1e-4 of a row).
    assert stats.mean[0] == pytest.approx(3.0, rel=1e-4) and stats.var[0] == pytest.approx(8 / 3, rel=1e-4)


def test_actor_snapshots_count_apart_and_the_learner_absorbs_what_they_counted():
    """Rollout actors (tfrl.rollout_actors) normalize with a snapshot that goes on counting; the learner then
    takes in each actor's count (Chan's merge). Absorbing [1, 3] and [5] equals the prior plus the rows 1, 3, 5."""
    learner = normalization.ObservationNormalizer(normalization.ObservationNormalization((1,), clip=10.0))
    prior = learner.stats.count  # C, as the layer's variable holds it
    first, second = learner.snapshot(), learner.snapshot()
    normalized = first.observe(np.array([[1.0], [3.0]]))
    # The snapshot's own statistics have counted [1, 3] (the learner's have not): mean 4 / (2 + C).
    mean_1 = 4 / (2 + prior)
    var_1 = (prior + 2 + 8 * prior / (2 + prior)) / (2 + prior)
    np.testing.assert_allclose(normalized[:, 0], (np.array([1.0, 3.0]) - mean_1) / np.sqrt(var_1 + 1e-8), rtol=1e-6)
    assert learner.stats.count == prior == pytest.approx(C)  # nothing reached the learner yet
    second.observe(np.array([[5.0]]))
    counted = first.counted()  # the rows alone, without the prior
    assert counted.count == 2 and counted.mean[0] == 2.0 and counted.var[0] == 1.0
    learner.absorb(first.counted())
    learner.absorb(second.counted())
    rows = np.array([1.0, 3.0, 5.0])
    total = 3 + prior
    mean = rows.sum() / total  # the prior's mean is 0
    var = (prior * (1.0 + mean ** 2) + ((rows - mean) ** 2).sum()) / total  # the prior: variance 1 around 0
    assert learner.stats.count == pytest.approx(total, rel=1e-12)
    assert learner.stats.mean[0] == pytest.approx(mean, rel=1e-12) and learner.stats.var[0] == pytest.approx(var, rel=1e-12)
    assert isinstance(running_stats.NoNormalization().snapshot().counted(), type(None))


def test_observations_are_counted_then_normalized_and_clipped():
    layer = normalization.ObservationNormalization((2,), clip=10.0)
    normalizer = normalization.ObservationNormalizer(layer)
    out = normalizer.observe(np.array([[0.0, 10.0], [2.0, 30.0]], np.float32))
    # mean (1, 20), variance (1, 100): every entry is one std from its mean.
    np.testing.assert_allclose(out, [[-1, -1], [1, 1]], rtol=1e-3)  # the prior weighs 1e-4 of a row
    assert out.dtype == np.float32
    np.testing.assert_allclose(normalizer(np.array([[1.0, 70.0]])), [[0.0, 5.0]], atol=1e-3)  # not counted:
    assert normalizer.stats.count == pytest.approx(2 + C)
    clipped = normalization.ObservationNormalizer(normalization.ObservationNormalization((2,), clip=0.5))
    np.testing.assert_allclose(clipped.observe(np.array([[0.0, 10.0], [2.0, 30.0]])), [[-0.5, -0.5], [0.5, 0.5]])


def test_rewards_are_scaled_by_the_std_of_the_running_return():
    scaler = running_stats.RewardScaler(num_envs=2, gamma=0.5, clip=10.0)
    first = scaler.scale(np.array([1.0, 3.0]), np.array([False, False]))
    # Returns (1, 3): variance 1, so the rewards pass unchanged.
    np.testing.assert_allclose(first, [1.0, 3.0], rtol=1e-4)
    second = scaler.scale(np.array([2.0, 2.0]), np.array([True, False]))
    # Returns 0.5 * (1, 3) + 2 = (2.5, 3.5); the four returns 1, 3, 2.5, 3.5 have mean 2.5 and variance
    # (2.25 + 0.25 + 0 + 1) / 4 = 0.875.
    np.testing.assert_allclose(second, [2 / math.sqrt(0.875)] * 2, rtol=1e-4)
    np.testing.assert_array_equal(scaler.returns, [0.0, 3.5])  # the first env's episode ended
    clipped = running_stats.RewardScaler(num_envs=1, gamma=0.0, clip=0.1)
    assert clipped.scale(np.array([5.0]), np.array([False]))[0] == pytest.approx(0.1)


def test_the_layer_normalizes_like_numpy_after_a_sync_and_loads_back():
    layer = normalization.ObservationNormalization((3,), clip=2.0)
    normalizer = normalization.ObservationNormalizer(layer)
    rng = np.random.default_rng(0)
    normalizer.observe(rng.normal([1.0, -5.0, 20.0], [0.1, 3.0, 8.0], size=(500, 3)))
    obs = rng.normal([1.0, -5.0, 20.0], [0.3, 9.0, 8.0], size=(64, 3)).astype(np.float32)
    assert not np.allclose(layer(obs).numpy(), normalizer(obs), atol=1e-3)  # not synced yet
    normalizer.sync()
    np.testing.assert_allclose(layer(obs).numpy(), normalizer(obs), rtol=1e-5, atol=1e-5)
    assert np.abs(normalizer(obs)).max() == pytest.approx(2.0)  # some entries were clipped
    fresh = normalization.ObservationNormalizer(normalization.ObservationNormalization((3,), clip=2.0))
    fresh.layer.set_weights(layer.get_weights())
    fresh.load()
    np.testing.assert_array_equal(fresh.stats.mean, normalizer.stats.mean)
    assert fresh.stats.count == normalizer.stats.count == pytest.approx(500 + C)


def test_the_export_takes_raw_observations(tmp_path):
    config = PPOConfig(hidden_sizes=(16,), normalize_observations=True)
    network = make_network(config, PENDULUM, make_head(PENDULUM))
    normalizer = normalization.ObservationNormalizer(normalization.make_layer(config, PENDULUM.obs_shape))
    rng = np.random.default_rng(1)
    normalizer.observe(rng.normal([0.5, -0.5, 4.0], [0.2, 0.2, 3.0], size=(300, 3)))
    normalizer.sync()
    policy = serving_policy(config, PENDULUM, network, normalizer.layer)
    version_dir = export.export_saved_model(policy, [3], tmp_path, "pendulum", {})
    raw = rng.normal([0.5, -0.5, 4.0], [0.2, 0.2, 3.0], size=(32, 3)).astype(np.float32)
    served = serving.load(version_dir).outputs(raw)
    live_mean = network(normalizer(raw))[0].numpy()[:, :1]
    np.testing.assert_allclose(served["action"], np.clip(live_mean, -2, 2), rtol=1e-5, atol=1e-5)
    assert not np.allclose(network(raw)[0].numpy()[:, :1], live_mean, atol=1e-3)  # raw != normalized input


def _ppo_config(**overrides):
    return PPOConfig(**{"total_env_steps": 1536, "num_envs": 2, "rollout_length": 256, "batch_size": 64,
                        "n_epochs": 2, "hidden_sizes": (16,), "eval_interval": 0, "final_eval_episodes": 2,
                        "log_interval": 512, "checkpoint_interval": 0, "normalize_observations": True,
                        "normalize_rewards": True, **overrides})


def _checkpointed_statistics(run_dir, config):
    layer = normalization.make_layer(config, PENDULUM.obs_shape)
    checkpoints.Checkpointer(run_dir, {normalization.CHECKPOINT_KEY: layer}).restore_latest()
    return [w.copy() for w in layer.get_weights()]


def test_a_resumed_ppo_run_continues_its_statistics_from_the_checkpoint(tmp_path):
    config = _ppo_config()
    runtime = _runtime()
    keras.utils.set_random_seed(0)
    polls = []
    stopped = training_loop.train(agents.get("ppo"), config, "Pendulum-v1", 0, runtime, tmp_path,
                                  training_loop.LoopOptions(progress_bar=False,
                                                            stop_requested=lambda: polls.append(1) or len(polls) > 1))
    assert stopped["kind"] == "stopped" and stopped["env_step"] == 512
    mean, var, count = _checkpointed_statistics(tmp_path, config)
    assert count == pytest.approx(512 + C)  # every observation of the first rollout, counted once
    assert checkpoints.Checkpointer(tmp_path, {}).restore_latest().arrays["reward_count"] == pytest.approx(512 + C)
    training_loop.train(agents.get("ppo"), config, "Pendulum-v1", 0, runtime, tmp_path, training_loop.LoopOptions(progress_bar=False))
    # Restarted from the prior, the counts would be 1024 + C: the resumed run's statistics went on from the
    # checkpoint's (its envs restart from a fresh reset, so its observations are not the uninterrupted run's).
    resumed_mean, resumed_var, resumed_count = _checkpointed_statistics(tmp_path, config)
    assert resumed_count == pytest.approx(1536 + C)
    assert checkpoints.Checkpointer(tmp_path, {}).restore_latest().arrays["reward_count"] == pytest.approx(1536 + C)
    assert not np.allclose(resumed_mean, mean)


@pytest.mark.parametrize("agent", ["ppo", "sac"])
def test_a_normalized_run_exports_a_policy_that_replays_its_final_evaluation(agent, tmp_path):
    if agent == "ppo":
        config = _ppo_config(total_env_steps=1024)
    else:
        config = SACConfig(total_env_steps=600, learning_starts=200, batch_size=64, hidden_sizes=(16,),
                           train_period_env_steps=100, gradient_steps_per_train=20, eval_interval=0,
                           final_eval_episodes=2, log_interval=300, checkpoint_interval=0,
                           normalize_observations=True)
    keras.utils.set_random_seed(0)
    final = training_loop.train(agents.get(agent), config, "Pendulum-v1", 0, _runtime(), tmp_path,
                                training_loop.LoopOptions(progress_bar=False))
    mean, var, count = _checkpointed_statistics(tmp_path, config)
    assert count == pytest.approx(config.total_env_steps + C)
    assert var[2] > 1.5  # the angular velocity's spread: far from the prior's 1, so the normalization matters
    runs.write_config(tmp_path, runs.RunRecord(agent, "Pendulum-v1", 0, config, env_info=PENDULUM.to_dict()))
    version_dir = runs.export_run(tmp_path, tmp_path / "models", "pendulum")
    replayed = evaluation.evaluate(serving.load(version_dir).policy, "Pendulum-v1", 2,
                                   seed=evaluation.FINAL_SEED_OFFSET)
    assert float(replayed.mean()) == pytest.approx(final["return_mean"], rel=1e-4)
