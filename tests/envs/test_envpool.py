"""--vector_mode=envpool (the envpool extra, which the test extra installs): gymnasium's autoreset, episode
statistics and seeding on EnvPool's C++ envs, its refusals, and a run that learns on it."""

import builtins

import numpy as np
import pytest

import tfrl
from tfrl import envs
from tfrl.errors import UsageError

CARTPOLE_LIMITS = np.array([2.4, np.inf, 12 * 2 * np.pi / 360, np.inf])  # |x|, |angle| where an episode ends


def test_same_step_autoreset_and_episode_records_like_gymnasium():
    env = envs.make_vector_env("CartPole-v1", 3, seed=0, vector_mode="envpool", training=True)
    try:
        stepper_obs, returns, lengths = env.first_obs, np.zeros(3), np.zeros(3, int)
        assert stepper_obs.shape == (3, 4) and stepper_obs.dtype == np.float32
        seen_done = False
        for t in range(60):
            actions = np.full(3, t % 2 if t > 20 else 0)  # push left, then wobble: episodes end at different steps
            next_obs, reward, terminated, truncated, infos = env.step(actions)
            returns, lengths = returns + reward, lengths + 1
            done = terminated | truncated
            if not done.any():
                assert "final_obs" not in infos
                continue
            seen_done = True
            final = infos["final_obs"]
            for i in np.flatnonzero(done):
                # The true last observation is past a limit; next_obs already starts the next episode.
                assert (np.abs(final[i]) > CARTPOLE_LIMITS).any()
                assert np.abs(next_obs[i]).max() <= 0.05  # CartPole resets uniformly in +-0.05
            episodes = envs.finished_episodes(done, infos)
            assert episodes == [(float(returns[i]), int(lengths[i])) for i in np.flatnonzero(done)]
            stored = envs.next_obs_for_storage(next_obs, done, infos)
            np.testing.assert_array_equal(stored[done], final[done])
            np.testing.assert_array_equal(stored[~done], next_obs[~done])
            returns[done], lengths[done] = 0, 0
        assert seen_done
    finally:
        env.close()


def test_seeding_env_i_gets_seed_plus_i_and_reset_with_a_seed_rebuilds_the_pool():
    def first_obs(seed, num_envs=3):
        env = envs.make_vector_env("CartPole-v1", num_envs, seed=seed, vector_mode="envpool")
        env.close()
        return env.first_obs

    np.testing.assert_array_equal(first_obs(5), first_obs(5))
    np.testing.assert_array_equal(first_obs(6, 1)[0], first_obs(5)[1])  # as tfrl's gymnasium envs: seed + i
    assert not np.array_equal(first_obs(5)[0], first_obs(5)[1])
    env = envs.make_vector_env("CartPole-v1", 3, seed=5, vector_mode="envpool")
    try:
        env.step(np.zeros(3, np.int64))
        np.testing.assert_array_equal(envs.reset_for_resume(env, 5, 0), envs.reset_for_resume(env, 5, 0))
    finally:
        env.close()


def test_the_pool_runs_one_thread_per_core_at_most(monkeypatch):
    from tfrl.envs.envpool_vector import EnvPoolVectorEnv

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    for num_envs, threads in ((8, 2), (1, 1)):
        env = EnvPoolVectorEnv("CartPole-v1", num_envs)
        try:
            assert env._pool.config["num_threads"] == threads
        finally:
            env.close()


@pytest.mark.parametrize("env, kwargs, message", [
    ("custom_envs:Corridor-v0", None, "--vector_mode=envpool: EnvPool has no custom_envs:Corridor-v0; use "
                                      "--vector_mode=sync or async"),
    ("FrozenLake-v1", None, "--vector_mode=envpool: EnvPool's FrozenLake-v1 has Discrete(16) observations"),
    ("CartPole-v1", {"sutton_barto_reward": True}, "--vector_mode=envpool takes no env kwargs"),
    ("ALE/Pong-v5", None, "--vector_mode=envpool: ALE/Pong-v5 is an Atari id"),
    (lambda: None, None, "--vector_mode=envpool takes a gymnasium id, not an env factory"),
])
def test_what_envpool_cannot_train_on_is_refused_in_one_line(env, kwargs, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        envs.make_vector_env(envs.as_spec(env, kwargs), 2, seed=0, vector_mode="envpool")


def test_a_missing_envpool_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def without_envpool(name, *args, **kwargs):
        if name == "envpool":
            raise ImportError("No module named 'envpool'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_envpool)
    with pytest.raises(UsageError, match=r"needs the envpool package, which is not installed: pip install "
                                         r"'tfrl\[envpool\]'"):
        envs.make_vector_env("CartPole-v1", 2, seed=0, vector_mode="envpool")


@pytest.mark.slow
def test_ppo_learns_cartpole_on_envpool_and_is_scored_on_gymnasium(tmp_path):
    run = tfrl.train("ppo", "CartPole-v1", run_dir=tmp_path / "run", seed=0, vector_mode="envpool",
                     hp={"total_env_steps": 50_000, "eval_interval": 0})
    assert run.complete and run.result["return_mean"] >= 400, run.result  # a random policy scores about 22
    assert tfrl.load_policy(run.run_dir).metadata is None  # a run dir's policy: evaluated on gymnasium's env


# --- MuJoCo (gymnasium's v5 ids, which EnvPool implements in C++ too) ---------------------------------------------

def test_mujoco_halfcheetah_on_envpool_has_gymnasiums_reward():
    # HalfCheetah-v5's reward as gymnasium defines it, by hand from the x positions before and after a step:
    # (x_after - x_before) / dt - 0.1 * |a|^2, dt = 5 frames of 0.01 s.
    import envpool  # noqa: PLC0415 - the envpool extra, which the test extra installs

    pool = envpool.make_gymnasium("HalfCheetah-v5", num_envs=2, seed=0)
    try:
        pool.reset()
        rng = np.random.default_rng(0)
        # EnvPool's reset reports x_position 0 whatever the initial noise: start from the first step's position.
        x_before = pool.step(rng.uniform(-1, 1, (2, 6)).astype(np.float32))[4]["x_position"]
        for _ in range(5):
            actions = rng.uniform(-1, 1, (2, 6)).astype(np.float32)
            _, reward, _, _, info = pool.step(actions)
            np.testing.assert_allclose(reward, (info["x_position"] - x_before) / 0.05 - 0.1 * (actions ** 2).sum(-1),
                                       rtol=1e-4, atol=1e-5)
            x_before = info["x_position"]
    finally:
        pool.close()


def test_mujoco_on_envpool_ends_episodes_as_gymnasium():
    # HalfCheetah-v5 never terminates and is truncated at 1000 steps (SAC and TD3 keep the bootstrap there);
    # Hopper-v5 terminates when it falls: its height below 0.7 or its torso tilted more than 0.2 rad.
    cheetah = envs.make_vector_env("HalfCheetah-v5", 2, seed=0, vector_mode="envpool", training=True)
    try:
        assert cheetah.first_obs.shape == (2, 17) and cheetah.first_obs.dtype == np.float32
        for t in range(1, 1001):
            _, _, terminated, truncated, infos = cheetah.step(np.zeros((2, 6), np.float32))
            assert not terminated.any() and truncated.all() == (t == 1000) and truncated.any() == (t == 1000)
        assert envs.finished_episodes(terminated | truncated, infos) == [(pytest.approx(r), 1000) for r in
                                                                         infos["final_info"]["episode"]["r"]]
    finally:
        cheetah.close()
    hopper = envs.make_vector_env("Hopper-v5", 2, seed=0, vector_mode="envpool", training=True)
    try:
        rng = np.random.default_rng(0)
        for t in range(1, 1001):
            _, _, terminated, truncated, infos = hopper.step(rng.uniform(-1, 1, (2, 3)).astype(np.float32))
            if terminated.any():
                break
        assert t < 1000 and not truncated.any()
        final = infos["final_obs"][terminated]
        assert ((final[:, 0] < 0.7) | (np.abs(final[:, 1]) > 0.2)).all(), final[:, :2]
    finally:
        hopper.close()


def test_td3_trains_on_envpool_mujoco_and_is_scored_on_gymnasium(tmp_path):
    run = tfrl.train("td3", "HalfCheetah-v5", run_dir=tmp_path / "run", seed=0, vector_mode="envpool",
                     preset="td3-halfcheetah-sb3zoo",  # the zoo's settings, without a best policy to keep
                     hp={"total_env_steps": 1200, "learning_starts": 1000, "replay_capacity": 2000,
                         "hidden_sizes": [32, 32], "eval_interval": 0, "final_eval_episodes": 1})
    assert run.complete and run.result["episodes"] == 1 and np.isfinite(run.result["return_mean"]), run.result
    assert tfrl.load_policy(run.run_dir).metadata is None  # a run dir's policy: evaluated on gymnasium's env
