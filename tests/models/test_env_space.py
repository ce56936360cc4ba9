"""A policy object takes the env's own observations (tfrl.models.env_space): Discrete and MultiDiscrete integers, Tuples
and nested Dicts, converted exactly as the env wrapper converts them for the networks; bad values are one line."""

import json
import pathlib

import gymnasium as gym
import numpy as np
import pytest

import tfrl
from tfrl import envs
from tfrl.envs import observations
from tfrl.errors import UsageError
from tfrl.models import env_space
from tfrl.models.policy_inputs import Field
from tfrl.models.portable.runtime import PortablePolicy
from tfrl.run import CONFIG_FILE, runs

NESTED = gym.spaces.Dict({
    "arm": gym.spaces.Dict({"joints": gym.spaces.Box(-1, 1, (3,), np.float32), "grip": gym.spaces.Discrete(3, start=-1)}),
    "parts": gym.spaces.Tuple((gym.spaces.MultiDiscrete([[2, 3], [4, 1]]), gym.spaces.MultiBinary(2))),
    "mode": gym.spaces.Discrete(5),
    "grid": gym.spaces.MultiBinary([2, 3]),
})


def description(space: gym.Space) -> dict:
    return env_space.parse(observations.env_space_json(space), "test")


def test_one_hot_values_by_hand():
    discrete = {"type": "Discrete", "n": 3, "start": -1}
    assert env_space.to_fields(discrete, -1, "p").tolist() == [1.0, 0.0, 0.0]  # -1 is the first of 3
    assert env_space.to_fields(discrete, np.array([1, 0]), "p").tolist() == [[0, 0, 1], [0, 1, 0]]  # a batch
    multi = {"type": "MultiDiscrete", "nvec": [3, 2], "start": [0, 0], "shape": [2]}
    assert env_space.to_fields(multi, [2, 1], "p").tolist() == [0, 0, 1, 0, 1]  # one-hot of 2 in 3, 1 in 2
    assert env_space.to_fields(multi, [[0, 0], [1, 1]], "p").tolist() == [[1, 0, 0, 1, 0], [0, 1, 0, 0, 1]]
    one_hot = np.array([0.0, 1.0, 0.0], np.float32)  # floats: the converted form, unchanged
    assert env_space.to_fields(discrete, one_hot, "p") is one_hot
    # Rows of 0/1 integers as wide as the one-hots, one 1 per dimension: the converted form too.
    assert env_space.to_fields(discrete, [[0, 0, 1]], "p") == [[0, 0, 1]]
    # A flat Discrete batch is the env's own values, even where it could be read as one one-hot row: two envs of
    # a Discrete(2) in states 0 and 1 are two observations, not the one-hot of state 1.
    binary = {"type": "Discrete", "n": 2, "start": 0}
    assert env_space.to_fields(binary, np.array([0, 1]), "p").tolist() == [[1, 0], [0, 1]]
    assert env_space.to_fields(discrete, [0, 0, 1], "p").tolist() == [[0, 1, 0], [0, 1, 0], [0, 0, 1]]
    assert env_space.to_fields(multi, [[0, 1, 0, 1, 0]], "p") == [[0, 1, 0, 1, 0]]
    assert env_space.to_fields(multi, np.zeros((0, 2), int), "p").shape == (0, 5)  # an empty batch
    large = env_space.to_fields({"type": "Discrete", "n": 100_000, "start": 0}, [7, 99_999], "p")
    assert large.shape == (2, 100_000) and large.sum() == 2 and large[0, 7] == large[1, 99_999] == 1


def test_the_env_s_own_values_convert_as_the_env_wrapper_converts_them():
    own = description(NESTED)
    wrapper = observations.StructuredObservation(_StaticEnv(NESTED))
    NESTED.seed(0)
    for _ in range(20):
        sample = NESTED.sample()
        expected = wrapper.observation(sample)
        converted = env_space.to_fields(own, sample, "policy")
        assert set(converted) == set(wrapper.observation_space.spaces) == {"arm.joints", "arm.grip", "parts.0", "parts.1", "mode",
                                                                               "grid"}
        for key, value in expected.items():
            np.testing.assert_array_equal(np.asarray(converted[key], np.float32), value, err_msg=key)
        assert env_space.to_fields(own, expected, "policy").keys() == expected.keys()  # the fields' own form


def test_which_spaces_are_described():
    assert observations.env_space_json(gym.spaces.Box(-1, 1, (3,))) == ""
    assert observations.env_space_json(gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (3,)),
                                                        "b": gym.spaces.MultiBinary(4)})) == ""
    assert json.loads(observations.env_space_json(gym.spaces.Discrete(16))) == {"type": "Discrete", "n": 16,
                                                                                "start": 0}
    assert json.loads(observations.env_space_json(gym.spaces.MultiBinary([2, 3]))) == {"type": "MultiBinary",
                                                                                       "shape": [2, 3]}
    assert observations.env_space_json(gym.spaces.MultiBinary(4)) == ""
    nested_boxes = gym.spaces.Dict({"a": gym.spaces.Dict({"b": gym.spaces.Box(-1, 1, (2,))})})
    assert json.loads(observations.env_space_json(nested_boxes))["type"] == "Dict"  # dotted keys: converted


def test_bad_values_and_descriptions_are_one_line():
    own = description(NESTED)
    sample = NESTED.sample()
    sample["mode"] = 5  # Discrete(5): 0 to 4
    with pytest.raises(UsageError, match=r"^policy: field 'mode' takes integers from 0 to 4, got 5$"):
        env_space.to_fields(own, sample, "policy")
    multi = {"type": "MultiDiscrete", "nvec": [3, 2], "start": [0, 0], "shape": [2]}
    with pytest.raises(UsageError, match=r"takes observations as 2 integers of shape \(2,\)"):
        env_space.to_fields(multi, [1, 1, 1], "policy")
    for damaged in ('{"type": "Graph"}', {"type": "Dict", "spaces": [{"type": "Box"}]}, {"type": "Discrete"},
                    {"type": "Tuple", "spaces": 3}, "[1, 2"):
        with pytest.raises(UsageError, match="^model: its env_space is not a description of an observation space"):
            env_space.parse(damaged, "model")
    # A list of tuples could be a batch: it is not read as one observation, and the fields refuse it.
    tuple_space = description(gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(2))))
    assert env_space.to_fields(tuple_space, [(0, 1), (1, 0)], "policy") == [(0, 1), (1, 0)]


def test_an_exported_frozenlake_policy_and_its_run_take_the_env_s_integers(tmp_path):
    run = tfrl.train("dqn", "FrozenLake-v1", hp={"total_env_steps": 600, "learning_starts": 200,
                                                  "eval_interval": 0, "final_eval_episodes": 2},
                     preset="none", run_dir=tmp_path / "run", verbose=0)
    metadata = json.loads((run.saved_model / "assets.extra" / "tfrl_metadata.json").read_text())
    assert metadata["observation"]["env_space"] == {"type": "Discrete", "n": 16, "start": 0}
    eye = np.eye(16, dtype=np.float32)
    for policy in (tfrl.load_policy(run.saved_model), tfrl.load_policy(run.run_dir)):
        actions = policy(eye)  # the one-hot vectors the network reads: every state at once
        assert [int(policy(state)) for state in range(16)] == actions.tolist()
        np.testing.assert_array_equal(policy(np.arange(16)), actions)  # the env's integers, a batch
        with pytest.raises(UsageError, match="takes integers from 0 to 15, got 16"):
            policy(16)
    saved = runs.read_config(run.run_dir)
    assert saved.env_info["env_space"] == {"type": "Discrete", "n": 16, "start": 0}


def test_a_portable_policy_converts_with_its_metadata():
    fed = []
    metadata = {"observation": {"shape": [4], "dtype": "float32",
                                "env_space": {"type": "Discrete", "n": 4, "start": 0}}}
    policy = PortablePolicy(pathlib.Path("policy.tflite"), lambda inputs: fed.append(inputs) or {"action": np.zeros(1)},
                            {"observation": Field("observation", (4,), "float32")}, metadata)
    policy(2)
    assert fed[0]["observation"].tolist() == [[0.0, 0.0, 1.0, 0.0]]
    binary = PortablePolicy(pathlib.Path("policy.tflite"),
                            lambda inputs: fed.append(inputs) or {"action": np.zeros(len(inputs["observation"]))},
                            {"observation": Field("observation", (2,), "float32")},
                            {"observation": {"shape": [2], "dtype": "float32",
                                             "env_space": {"type": "Discrete", "n": 2, "start": 0}}})
    assert binary(np.array([0, 1])).shape == (2,)  # two envs' states: two actions
    assert fed[1]["observation"].tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_a_config_with_a_damaged_env_space_is_refused_in_one_line(tmp_path):
    run = tfrl.train("dqn", "FrozenLake-v1", hp={"total_env_steps": 300, "learning_starts": 200, "eval_interval": 0,
                                                  "final_eval_episodes": 1},
                     preset="none", run_dir=tmp_path / "run", verbose=0, export=False)
    config_path = run.run_dir / CONFIG_FILE
    config = json.loads(config_path.read_text())
    config["env_info"]["env_space"] = {"type": "Discrete", "n": 0, "start": 0}
    config_path.write_text(json.dumps(config))
    with pytest.raises(UsageError, match="env_info'.*not a description of an observation space"):
        runs.read_config(run.run_dir)


def test_a_sync_vector_env_carries_the_space_and_env_info_keeps_it():
    vector_env = envs.make_vector_env("Blackjack-v1", 1, seed=0)
    try:
        info = envs.env_info(vector_env, "Blackjack-v1")
    finally:
        vector_env.close()
    assert [leaf["n"] for leaf in json.loads(info.env_space)["spaces"]] == [32, 11, 2]
    assert envs.EnvInfo.from_dict(info.to_dict()) == info


class _StaticEnv(gym.Env):
    def __init__(self, space):
        self.observation_space, self.action_space = space, gym.spaces.Discrete(2)


class _DictWithMaskMethod(gym.Env):
    observation_space = gym.spaces.Dict({"pos": gym.spaces.Discrete(6),
                                         "speed": gym.spaces.Box(-1, 1, (2,), np.float32)})
    action_space = gym.spaces.Discrete(3)

    def action_masks(self):
        return np.array([1, 1, 0], bool)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"pos": 2, "speed": np.float32([0.5, -0.5])}, {}

    def step(self, action):
        return {"pos": 3, "speed": np.float32([0.1, 0.2])}, 0.0, False, False, {}


def test_a_dict_observation_beside_a_mask_method_converts_as_the_env_wrapper_converts_it():
    """The env's own Dict goes under "observation", beside the mask: its entries convert as the env wrapper's."""
    vector_env = envs.make_vector_env(envs.EnvSpec(factory=_DictWithMaskMethod), 1, seed=0)
    try:
        wrapped, _ = vector_env.reset(seed=0)
        own = env_space.parse(vector_env.env_space, "test")
    finally:
        vector_env.close()
    converted = env_space.to_fields(own, {"observation": {"pos": 2, "speed": [0.5, -0.5]}, "action_mask": [1, 1, 0]},
                                    "policy")
    assert set(converted) == set(wrapped) == {"observation.pos", "observation.speed", "action_mask"}
    for key, value in wrapped.items():
        np.testing.assert_array_equal(np.asarray(converted[key], np.float32).reshape(-1),
                                      np.asarray(value, np.float32).reshape(-1), err_msg=key)
