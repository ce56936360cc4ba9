"""tfrl.rollout_actors.on_policy: rollouts stepped in Ray actors equal the in-process rollout (one actor), keep
each env's seed (two actors) and report episodes on the run's clock. Ray runs locally on 2 CPUs, without its
dashboard, its files under the test's tmp dir, and is shut down at the end."""

import numpy as np
import pytest

from tfrl import envs, networks
from tfrl.agents.actor_critic.actor import ActorCriticActor
from tfrl.agents.actor_critic.collection import collect_steps
from tfrl.agents.actor_critic.config import ActorCriticConfig
from tfrl.agents.actor_critic.networks import make_head, make_network
from tfrl.agents.actor_critic.rollout import STEP_FIELDS, RolloutStorage
from tfrl.normalization import NoNormalization
from tfrl.rollout_actors.on_policy import RayRollouts, shares

T, N, SEED = 40, 4, 3  # CartPole's episodes end inside 40 steps of a random policy: episodes are reported


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    import ray  # the test extra installs it

    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(tmp_path_factory.mktemp("ray")),
             logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def policy():
    """(env info, head, the mirror) of a small actor-critic network for CartPole."""
    env = envs.make_vector_env("CartPole-v1", 1, seed=0)
    info = envs.env_info(env, "CartPole-v1")
    env.close()
    head = make_head(info)
    config = ActorCriticConfig(hidden_sizes=(8,))
    mirror = networks.acting_network(make_network(config, info, head), networks.NumpyActorCritic)
    return info, head, mirror


def _in_process(info, head, mirror):
    episodes = []
    stepper = envs.VectorStepper(envs.make_vector_env("CartPole-v1", N, seed=SEED, training=True),
                                 on_episode=lambda *episode: episodes.append(episode))
    storage = RolloutStorage(T, N, info.observations.row_shape, head)
    last_value = collect_steps(stepper, ActorCriticActor(mirror, head, seed=SEED), NoNormalization(), head, storage)
    stepper.env.close()
    return storage, last_value, episodes


def _remote(info, head, mirror, actors):
    episodes = []
    rollouts = RayRollouts("CartPole-v1", N, actors, SEED, "sync", T, info.observations.row_shape, "float32", head)
    storage = RolloutStorage(T, N, info.observations.row_shape, head)
    try:
        last_value = rollouts.collect(mirror, storage, lambda *episode: episodes.append(episode))
        assert rollouts.env_step == T * N
    finally:
        rollouts.close()
    return storage, last_value, episodes


def test_shares_are_contiguous_and_even():
    assert shares(4, 1) == [(0, 4)] and shares(5, 2) == [(0, 3), (3, 2)] and shares(3, 3) == [(0, 1), (1, 1), (2, 1)]
    with pytest.raises(ValueError, match="actors must be between 1 and num_envs=4, got 5"):
        shares(4, 5)


def test_one_actor_makes_the_in_process_rollout_bit_for_bit(ray_local, policy):
    info, head, mirror = policy
    local, local_last, local_episodes = _in_process(info, head, mirror)
    remote, remote_last, remote_episodes = _remote(info, head, mirror, actors=1)
    for name in STEP_FIELDS:
        np.testing.assert_array_equal(getattr(remote, name), getattr(local, name), err_msg=name)
    np.testing.assert_array_equal(remote_last, local_last)
    assert remote_episodes == local_episodes and len(local_episodes) >= N  # the run's env steps, returns, lengths
    finished = [storage.finish(last, 0.99, 0.95, head, 0) for storage, last in ((local, local_last),
                                                                                   (remote, remote_last))]
    for field in ("obs", "actions", "advantages", "returns", "log_probs"):
        np.testing.assert_array_equal(getattr(finished[1], field), getattr(finished[0], field), err_msg=field)


def test_two_actors_keep_each_envs_seed_and_the_runs_clock(ray_local, policy):
    info, head, mirror = policy
    local, _, _ = _in_process(info, head, mirror)
    remote, last_value, episodes = _remote(info, head, mirror, actors=2)
    np.testing.assert_array_equal(remote.obs[0], local.obs[0])  # env i reset with seed + i in either
    assert last_value.shape == (N,) and np.isfinite(last_value).all()
    assert episodes and all(0 < env_step <= T * N and env_step % N == 0 for env_step, _, _ in episodes)
    assert sum(length for _, _, length in episodes) <= T * N
    # every ended episode is marked done in its env's column, as many as were reported
    assert int(remote.dones.sum()) == len(episodes)
