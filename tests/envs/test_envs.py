"""Tests for tfrl.envs: id resolution and the SAME_STEP autoreset bookkeeping on real gymnasium envs."""

import importlib
import logging
import re

import numpy as np
import pytest

from tfrl import envs
from tfrl.envs import EnvIdError
from tfrl.errors import UsageError

# CartPole-v1 terminates when |x| > 2.4 or |pole angle| > 12 degrees.
CARTPOLE_X_LIMIT = 2.4
CARTPOLE_ANGLE_LIMIT = 12 * 2 * np.pi / 360  # 0.2094 rad


@pytest.fixture
def fresh_alias_warnings(monkeypatch):
    """The once-per-process warning memory, emptied for this test (another test may have warned already)."""
    monkeypatch.setattr(envs, "_warned_aliases", set())


def test_deprecated_lunar_lander_id_resolves_to_v3_and_warns_once(fresh_alias_warnings, caplog):
    with caplog.at_level(logging.WARNING, logger="absl"):
        assert envs.resolve_env_id("LunarLander-v2") == "LunarLander-v3"
        assert envs.resolve_env_id("LunarLander-v2") == "LunarLander-v3"
    warnings = [r for r in caplog.records if "LunarLander-v2 is deprecated" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert "using LunarLander-v3" in warnings[0].getMessage()


def test_current_ids_resolve_to_themselves_without_warning(fresh_alias_warnings, caplog):
    with caplog.at_level(logging.WARNING, logger="absl"):
        assert envs.resolve_env_id("LunarLander-v3") == "LunarLander-v3"
        assert envs.resolve_env_id("CartPole-v1") == "CartPole-v1"
    assert not [r for r in caplog.records if "deprecated" in r.getMessage()]


@pytest.mark.parametrize("env_id, close_match", [
    ("CartPole-v9", "CartPole-v1"),
    ("LunarLandr-v3", "LunarLander-v3"),
])
def test_unknown_env_id_raises_listing_close_matches(env_id, close_match):
    with pytest.raises(EnvIdError) as raised:
        envs.resolve_env_id(env_id)
    message = str(raised.value)
    assert message.startswith(f"unknown environment id {env_id!r}; close matches: ")
    assert close_match in message.split("close matches: ", 1)[1].split(", ")


def test_env_id_error_is_a_usage_error():
    assert issubclass(EnvIdError, UsageError)  # launchers print it as one line and exit 2


def test_box_actions_give_their_shape_and_bounds():
    env = envs.make_vector_env("Pendulum-v1", num_envs=2, seed=0)
    try:
        info = envs.env_info(env, "Pendulum-v1")
    finally:
        env.close()
    assert (info.continuous, info.action_shape, info.action_low, info.action_high) == (True, (1,), (-2.0,), (2.0,))
    assert info.action_size == 1 and envs.EnvInfo.from_dict(info.to_dict()) == info


@pytest.mark.parametrize("num_envs", [0, -1])
def test_make_vector_env_rejects_non_positive_num_envs(num_envs):
    with pytest.raises(UsageError, match=f"num_envs must be >= 1, got {num_envs}"):
        envs.make_vector_env("CartPole-v1", num_envs=num_envs, seed=0)


def test_make_vector_env_rejects_unknown_vector_mode():
    with pytest.raises(UsageError, match="--vector_mode: unknown mode 'threads'; choose one of sync, async"):
        envs.make_vector_env("CartPole-v1", num_envs=1, seed=0, vector_mode="threads")


def test_make_vector_env_shapes_and_env_info():
    env = envs.make_vector_env("CartPole-v1", num_envs=3, seed=0)
    try:
        assert env.num_envs == 3
        assert env.first_obs.shape == (3, 4)
        assert env.first_obs.dtype == np.float32
        info = envs.env_info(env, "CartPole-v1")
        assert info == envs.EnvInfo(env_id="CartPole-v1", obs_shape=(4,), num_actions=2)
        assert info.to_dict() == {"env_id": "CartPole-v1", "obs_shape": [4], "num_actions": 2}
        next_obs, reward, terminated, truncated, _ = env.step(np.zeros(3, np.int64))
        assert next_obs.shape == (3, 4) and reward.shape == (3,)
        assert terminated.shape == (3,) and truncated.shape == (3,)
    finally:
        env.close()


def test_make_vector_env_seeding():
    def first_obs(seed):
        env = envs.make_vector_env("CartPole-v1", num_envs=2, seed=seed)
        env.close()
        return env.first_obs

    same, again, other = first_obs(3), first_obs(3), first_obs(4)
    np.testing.assert_array_equal(same, again)
    assert not np.array_equal(same, other)
    assert not np.array_equal(same[0], same[1])  # sub-envs get seeds seed, seed+1, ... not one seed


def test_make_vector_env_resolves_deprecated_id():
    env = envs.make_vector_env("LunarLander-v2", num_envs=1, seed=0)
    try:
        assert env.first_obs.shape == (1, 8)
        assert env.envs[0].spec.id == "LunarLander-v3"
    finally:
        env.close()


def _run_until_an_episode_ends(env, action_for_env0=1, max_steps=600):
    """Steps 2 CartPoles, env 0 with a constant action, env 1 alternating; returns the step where env 0 ends."""
    obs = env.first_obs
    for t in range(1, max_steps + 1):
        action = np.array([action_for_env0, t % 2])
        next_obs, reward, terminated, truncated, infos = env.step(action)
        done = terminated | truncated
        if done[0]:
            return t, obs, next_obs, done, terminated, infos
        obs = np.array(next_obs)
    raise AssertionError("env 0 never finished")


def test_next_obs_for_storage_uses_final_obs_of_finished_envs():
    env = envs.make_vector_env("CartPole-v1", num_envs=2, seed=0)
    try:
        steps, last_obs, next_obs, done, terminated, infos = _run_until_an_episode_ends(env)
        assert terminated[0]  # pushing right forever tips the pole within ~10-40 steps
        stored = envs.next_obs_for_storage(next_obs, done, infos)

        x, angle = stored[0, 0], stored[0, 2]
        assert abs(x) > CARTPOLE_X_LIMIT or abs(angle) > CARTPOLE_ANGLE_LIMIT  # the terminal state
        np.testing.assert_array_equal(stored[0], infos["final_obs"][0])
        # next_obs[0] is the reset obs of the next episode: all four values in [-0.05, 0.05].
        assert np.all(np.abs(next_obs[0]) <= 0.05)
        assert not np.allclose(stored[0], next_obs[0])
        # The terminal state is one physics step from the last obs: close to it, unlike the reset obs.
        assert np.abs(stored[0] - last_obs[0]).max() < 0.5
        # Env 1 did not finish (alternating actions keep the pole up longer): its next obs is untouched.
        assert not done[1]
        np.testing.assert_array_equal(stored[1], next_obs[1])
        assert stored.dtype == np.float32
    finally:
        env.close()


def test_next_obs_for_storage_returns_a_copy():
    next_obs = np.ones((2, 4), np.float32)
    stored = envs.next_obs_for_storage(next_obs, np.array([False, False]), {})
    next_obs[:] = 7.0  # the vector env reuses its buffer (copy=False)
    np.testing.assert_array_equal(stored, np.ones((2, 4)))


def test_finished_episodes_report_return_and_length_of_the_counted_steps():
    env = envs.make_vector_env("CartPole-v1", num_envs=2, seed=0)
    try:
        assert envs.finished_episodes(np.array([False, False]), {}) == []
        steps, _, _, done, _, infos = _run_until_an_episode_ends(env)
        episodes = envs.finished_episodes(done, infos)
        # CartPole pays +1 per step, the terminating one included: return = length = steps counted.
        assert episodes == [(float(steps), steps)]
        assert isinstance(episodes[0][0], float) and isinstance(episodes[0][1], int)
    finally:
        env.close()


@pytest.mark.parametrize("env_id, package, install", [
    ("ALE/NoSuchGame-v5", "ale_py", "pip install 'tfrl[atari]'"),
    ("MinAtar/NoSuchGame-v1", "minatar.gym", "pip install minatar"),
])
def test_ids_of_a_missing_plugin_name_what_to_install(monkeypatch, env_id, package, install):
    real_import = importlib.import_module

    def import_module(name, *args):
        if name == package:
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", import_module)
    with pytest.raises(envs.EnvIdError, match=re.escape(f"{env_id} is registered by the {package} package, which is "
                                                        f"not installed: {install}")):
        envs.resolve_env_id(env_id)


@pytest.fixture
def mujoco_default_warnings(monkeypatch):
    """MuJoCo with its default warning handler and tfrl's once-per-message memory emptied; both put back after."""
    mujoco = pytest.importorskip("mujoco")
    monkeypatch.setattr(envs, "_mujoco_messages", set())
    before = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(None)
    yield mujoco
    mujoco.set_mju_user_warning(before)


def test_mujoco_warnings_are_logged_once_and_no_log_file_is_written(mujoco_default_warnings, tmp_path,
                                                                     monkeypatch, caplog):
    # gymnasium's HalfCheetah-v5 model sets the deprecated 'settotalmass': MuJoCo's default handler prints it and
    # appends it to MUJOCO_LOG.TXT in the working directory, once per env made. tfrl logs it once, at debug level
    # (nothing the user can do about gymnasium's model files; it printed before a bad flag's one error line).
    monkeypatch.chdir(tmp_path)
    spec = envs.as_spec("HalfCheetah-v5")
    with caplog.at_level(logging.DEBUG, logger="absl"):
        for _ in range(2):
            spec.make().close()
    logged = [(r.levelno, r.getMessage()) for r in caplog.records if r.getMessage().startswith("MuJoCo: ")]
    assert len(logged) == 1 and logged[0][0] == logging.DEBUG and "settotalmass" in logged[0][1], logged
    assert list(tmp_path.iterdir()) == []


def test_a_mujoco_warning_handler_the_user_set_stays(mujoco_default_warnings, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = []
    mujoco_default_warnings.set_mju_user_warning(seen.append)
    envs.as_spec("HalfCheetah-v5").make().close()
    assert len(seen) == 1 and "settotalmass" in seen[0]
    assert mujoco_default_warnings.get_mju_user_warning() == seen.append
