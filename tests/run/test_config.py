"""Tests for tfrl.config: presets (tfrl.presets), and typed --hp overrides of an agent's config dataclass."""

import dataclasses
import json
import pathlib
from typing import Optional

import pytest

from tfrl import agents, config as config_lib, presets
from tfrl.agents.dqn.config import DQNConfig
from tfrl.config import ConfigError
from tfrl.errors import UsageError

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "tfrl" / "presets"


def _write_preset(directory, name, agent="dqn", env_ids=("CartPole-v1",), hparams=None, **extra):
    raw = {"agent": agent, "env_ids": list(env_ids), "description": f"{name} for tests",
           "hparams": hparams or {}, **extra}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps(raw))
    return directory / f"{name}.json"


# --- the built-in presets, tfrl/presets/ ----------------------------------------------

def test_cartpole_preset_is_found_for_dqn():
    preset = presets.find("dqn", "CartPole-v1", dirs=[CONFIG_DIR])
    assert preset is not None and preset.name == "dqn-cartpole"
    assert preset.agent == "dqn" and "CartPole-v1" in preset.env_ids


@pytest.mark.parametrize("env_id", ["LunarLander-v2", "LunarLander-v3"])
def test_lunar_lander_preset_is_found_for_both_ids(env_id):
    # tfrl/presets/dqn-lunarlander.json lists both the deprecated and the current id.
    preset = presets.find("dqn", env_id, dirs=[CONFIG_DIR])
    assert preset is not None, f"no dqn preset in {CONFIG_DIR} lists {env_id}"
    assert preset.name == "dqn-lunarlander"


def test_no_preset_for_an_env_without_one():
    assert presets.find("dqn", "Acrobot-v1", dirs=[CONFIG_DIR]) is None


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.json")), ids=lambda p: p.name)
def test_every_repository_preset_applies_to_its_agent_config(path):
    # A typo or an out-of-range value in a preset file must fail here, not at the start of a long run.
    preset = presets.load_file(path)
    config_cls = agents.get(preset.agent).config_cls
    config = config_lib.apply_overrides(config_cls(), preset.hparams, f"preset {preset.name}")
    for key in preset.hparams:
        value = getattr(config, key)
        expected = preset.hparams[key]
        assert (list(value) if isinstance(value, tuple) else value) == expected


@pytest.mark.parametrize("agent", ["sac", "td3"])
def test_halfcheetah_picks_tfrls_preset_the_zoo_settings_in_bfloat16_with_the_best_policy_kept(agent):
    own = presets.find(agent, "HalfCheetah-v5", dirs=[CONFIG_DIR])
    zoo = presets.find(agent, "HalfCheetah-v5", name=f"{agent}-halfcheetah-sb3zoo", dirs=[CONFIG_DIR])
    assert own.name == f"{agent}-halfcheetah" and own.runtime == {"cpu_bfloat16": True}
    assert own.hparams == {**zoo.hparams, "eval_episodes": 10, "keep_best_policy": True}


def test_preset_by_name():
    preset = presets.find("dqn", "Acrobot-v1", name="dqn-cartpole", dirs=[CONFIG_DIR])
    assert preset.name == "dqn-cartpole"  # an explicit name wins over the env id


def test_preset_none_means_defaults_only():
    assert presets.find("dqn", "CartPole-v1", name="none", dirs=[CONFIG_DIR]) is None


def test_a_preset_name_typo_gets_the_closest_names_and_one_far_off_the_list(tmp_path):
    with pytest.raises(ConfigError) as raised:
        presets.find("dqn", "CartPole-v1", name="dqn-cartpol")  # the built-in presets
    message = str(raised.value)
    assert message.startswith("--preset: no preset named 'dqn-cartpol' in the built-in presets; did you mean ")
    assert "dqn-cartpole" in message.split("did you mean ", 1)[1].rstrip("?").split(", ")
    (tmp_path / "mine.json").write_text(json.dumps({"agent": "dqn", "env_ids": ["CartPole-v1"],
                                                     "description": "", "hparams": {}}))
    with pytest.raises(ConfigError) as raised:
        presets.find("dqn", "CartPole-v1", name="zzzzzzzz", dirs=presets.search_dirs(tmp_path))
    message = str(raised.value)
    assert message.startswith(f"--preset: no preset named 'zzzzzzzz' in {tmp_path} or the built-in presets; "
                              "available: ")
    assert {"mine", "dqn-cartpole"} <= set(message.split("available: ", 1)[1].split(", "))


def test_the_users_folder_is_searched_first_and_its_files_replace_built_in_ones(tmp_path):
    assert presets.find("dqn", "CartPole-v1", dirs=presets.search_dirs(None)).name == "dqn-cartpole"
    preset = {"agent": "dqn", "env_ids": ["CartPole-v1"], "description": "mine", "hparams": {"batch_size": 7}}
    (tmp_path / "dqn-cartpole.json").write_text(json.dumps(preset))
    found = presets.find("dqn", "CartPole-v1", dirs=presets.search_dirs(tmp_path))
    assert (found.description, found.hparams) == ("mine", {"batch_size": 7})
    assert presets.find("dqn", "CartPole-v1", name="dqn-cartpole", dirs=presets.search_dirs(tmp_path)).description == "mine"
    # Another built-in preset is still found beside the user's folder.
    assert presets.find("ppo", "CartPole-v1", dirs=presets.search_dirs(tmp_path)).name == "ppo-cartpole"


def test_a_preset_file_with_a_key_given_twice_or_a_nan_is_refused(tmp_path):
    path = tmp_path / "twice.json"
    path.write_text('{"agent": "dqn", "env_ids": [], "description": "", "hparams": {"gamma": 0.9, "gamma": 0.5}}')
    with pytest.raises(ConfigError, match="key 'gamma' is given twice"):
        presets.load_file(path)
    path.write_text('{"agent": "dqn", "env_ids": [], "description": "", "hparams": {"gamma": NaN}}')
    with pytest.raises(ConfigError, match="NaN is not a number JSON allows"):
        presets.load_file(path)


def test_preset_by_name_for_another_agent_is_rejected(tmp_path):
    _write_preset(tmp_path, "a2c-cartpole", agent="a2c")
    with pytest.raises(ConfigError, match="--preset=a2c-cartpole is for agent 'a2c', not 'dqn'"):
        presets.find("dqn", "CartPole-v1", name="a2c-cartpole", dirs=[tmp_path])


def test_auto_preset_matches_agent_and_prefers_the_shortest_name(tmp_path):
    _write_preset(tmp_path, "dqn-lunarlander-zoo-replica", env_ids=("LunarLander-v2", "LunarLander-v3"))
    _write_preset(tmp_path, "dqn-lunarlander", env_ids=("LunarLander-v2", "LunarLander-v3"))
    _write_preset(tmp_path, "a2c-lunar", agent="a2c", env_ids=("LunarLander-v3",))
    assert presets.find("dqn", "LunarLander-v2", dirs=[tmp_path]).name == "dqn-lunarlander"
    assert presets.find("dqn", "LunarLander-v3", dirs=[tmp_path]).name == "dqn-lunarlander"
    assert presets.find("a2c", "LunarLander-v3", dirs=[tmp_path]).name == "a2c-lunar"
    assert presets.find("a2c", "LunarLander-v2", dirs=[tmp_path]) is None


def test_preset_file_with_missing_or_extra_keys_is_a_config_error_when_named(tmp_path):
    (tmp_path / "broken.json").write_text(json.dumps({"agent": "dqn", "hparams": {}}))
    with pytest.raises(ConfigError, match="expected the keys .* and optionally \"runtime\""):
        presets.find("dqn", "CartPole-v1", name="broken", dirs=[tmp_path])
    _write_preset(tmp_path, "extra", comment="not allowed")
    with pytest.raises(ConfigError, match="expected the keys .* and optionally \"runtime\""):
        presets.find("dqn", "CartPole-v1", name=str(tmp_path / "extra.json"), dirs=[tmp_path])


def test_preset_file_with_bad_json_is_a_config_error_when_named(tmp_path):
    (tmp_path / "bad.json").write_text('{"agent": "dqn",')
    with pytest.raises(ConfigError, match="not valid JSON"):
        presets.find("dqn", "CartPole-v1", name="bad", dirs=[tmp_path])


def test_json_files_that_are_not_presets_do_not_break_the_automatic_choice(tmp_path):
    (tmp_path / "bad.json").write_text('{"agent": "dqn",')
    (tmp_path / "package.json").write_text(json.dumps({"name": "something else"}))
    (tmp_path / "wrong-types.json").write_text(json.dumps({"agent": "dqn", "env_ids": "CartPole-v1",
                                                            "description": "", "hparams": {}}))
    assert presets.find("dqn", "CartPole-v1", dirs=[tmp_path]) is None
    _write_preset(tmp_path, "dqn-cartpole")
    assert presets.find("dqn", "CartPole-v1", dirs=[tmp_path]).name == "dqn-cartpole"


def test_a_preset_can_be_given_by_its_path(tmp_path):
    path = _write_preset(tmp_path / "elsewhere", "my-tuning", env_ids=("Acrobot-v1",))
    preset = presets.find("dqn", "CartPole-v1", name=str(path), dirs=[CONFIG_DIR])
    assert (preset.name, preset.env_ids) == ("my-tuning", ("Acrobot-v1",))


def test_config_error_is_a_usage_error():
    assert issubclass(ConfigError, UsageError)


# --- overrides: coercion ------------------------------------------------------------

@pytest.mark.parametrize("key, text, expected", [
    ("total_env_steps", "1e5", 100_000),
    ("total_env_steps", "100_000", 100_000),
    ("total_env_steps", "20000", 20_000),
    ("hidden_sizes", "64,64", (64, 64)),
    ("hidden_sizes", "[32, 16]", (32, 16)),
    ("hidden_sizes", "128", (128,)),
    ("dueling", "false", False),
    ("dueling", "True", True),
    ("double_dqn", "0", False),
    ("learning_rate", "1e-3", 1e-3),
    ("gamma", "0.5", 0.5),
])
def test_cli_override_strings_are_coerced_to_the_field_type(key, text, expected):
    config = config_lib.apply_overrides(DQNConfig(), {key: text}, "--hp")
    value = getattr(config, key)
    assert value == expected
    assert type(value) is type(expected)


def test_json_values_are_coerced_to_the_field_type():
    config = config_lib.apply_overrides(
        DQNConfig(), {"hidden_sizes": [64, 32], "total_env_steps": 5e4, "learning_rate": 1, "dueling": True},
        "preset test")
    assert config.hidden_sizes == (64, 32)
    assert config.total_env_steps == 50_000 and type(config.total_env_steps) is int
    assert config.learning_rate == 1.0 and type(config.learning_rate) is float
    assert config.dueling is True


def test_large_integer_strings_are_exact():
    # Going through float() would turn 2**53 + 1 into 2**53.
    config = config_lib.apply_overrides(DQNConfig(), {"total_env_steps": "9007199254740993"}, "--hp")
    assert config.total_env_steps == 9007199254740993


def test_overrides_leave_other_fields_at_their_values():
    base = DQNConfig(learning_rate=1e-4)
    config = config_lib.apply_overrides(base, {"batch_size": "32"}, "--hp")
    assert config == dataclasses.replace(base, batch_size=32)


@dataclasses.dataclass(frozen=True)
class _OptionalFieldsConfig:
    """Config fields written the two ways Python spells Optional (the repo uses `from __future__ import annotations`
    in config modules, so annotations are strings that get_type_hints evaluates)."""

    limit_old_style: Optional[int] = None
    limit_new_style: "int | None" = None


@pytest.mark.parametrize("field", ["limit_old_style", "limit_new_style"])
def test_optional_fields_accept_a_value_or_none(field):
    config = config_lib.apply_overrides(_OptionalFieldsConfig(), {field: "512"}, "--hp")
    assert getattr(config, field) == 512
    config = config_lib.apply_overrides(config, {field: "none"}, "--hp")
    assert getattr(config, field) is None
    with pytest.raises(ConfigError, match=f"hyperparameter '{field}': 'lots' is not a valid int"):
        config_lib.apply_overrides(_OptionalFieldsConfig(), {field: "lots"}, "--hp")


def test_to_dict_round_trips_through_json_and_overrides():
    config = DQNConfig(hidden_sizes=(64, 32), dueling=True, learning_rate=1e-3)
    as_json = json.loads(json.dumps(config_lib.to_dict(config)))
    assert as_json["hidden_sizes"] == [64, 32]
    assert config_lib.apply_overrides(DQNConfig(), as_json, "config.json") == config


# --- overrides: errors -------------------------------------------------------------------

def test_unknown_key_names_close_matches():
    with pytest.raises(ConfigError) as raised:
        config_lib.apply_overrides(DQNConfig(), {"learning_rat": "1e-3"}, "--hp")
    message = str(raised.value)
    assert message.startswith("--hp: unknown hyperparameter 'learning_rat' for DQNConfig; did you mean ")
    assert message.endswith("?")
    close = message.split("did you mean ", 1)[1][:-1].split(", ")
    assert close[0] == "learning_rate"  # the closest first; learning_starts may follow


def test_unknown_key_without_close_match_has_no_hint():
    with pytest.raises(ConfigError) as raised:
        config_lib.apply_overrides(DQNConfig(), {"zzz": "1"}, "preset x")
    assert str(raised.value) == "preset x: unknown hyperparameter 'zzz' for DQNConfig"


@pytest.mark.parametrize("key, value, type_name", [
    ("batch_size", "abc", "int"),
    ("batch_size", "1.5", "int"),
    ("batch_size", True, "int"),  # JSON true is not a number
    ("learning_rate", "fast", "float"),
    ("dueling", "maybe", "bool"),
    ("dueling", 1, "bool"),
    ("hidden_sizes", "64,x", "int"),
    ("hidden_sizes", 64, "tuple[int, ...]"),
])
def test_ill_typed_value_is_a_config_error_naming_key_value_and_type(key, value, type_name):
    with pytest.raises(ConfigError) as raised:
        config_lib.apply_overrides(DQNConfig(), {key: value}, "--hp")
    message = str(raised.value)
    assert message.startswith(f"hyperparameter {key!r}: ")
    assert message.endswith(f"is not a valid {type_name}")


@pytest.mark.parametrize("overrides, message", [
    ({"gamma": "1.5"}, "--hp: gamma must be in [0, 1], got 1.5"),
    ({"batch_size": "0"}, "--hp: batch_size must be > 0, got 0"),
    ({"num_envs": "0"}, "--hp: num_envs must be > 0, got 0"),
    ({"learning_rate": "0"}, "--hp: learning_rate must be > 0, got 0.0"),
    ({"learning_rate": "nan"}, "hyperparameter 'learning_rate': 'nan' is not a finite number"),
    ({"target_update_tau": "0"}, "--hp: target_update_tau must be in (0, 1], got 0.0"),
    ({"epsilon_end": "-0.1"}, "--hp: epsilon_end must be in [0, 1], got -0.1"),
    ({"hidden_sizes": ""}, "--hp: hidden_sizes must be positive layer sizes, got ()"),
    ({"hidden_sizes": "64,0"}, "--hp: hidden_sizes must be positive layer sizes, got (64, 0)"),
    ({"batch_size": "64", "replay_capacity": "32"}, "--hp: batch_size must not exceed replay_capacity"),
])
def test_out_of_range_value_is_a_config_error(overrides, message):
    with pytest.raises(ConfigError) as raised:
        config_lib.apply_overrides(DQNConfig(), overrides, "--hp")
    assert str(raised.value) == message


def test_config_dataclass_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DQNConfig().gamma = 0.5


# --- parse_cli_overrides ---------------------------------------------------------------------

def test_parse_cli_overrides_splits_on_the_first_equals_and_strips():
    assert config_lib.parse_cli_overrides([" learning_rate = 1e-3", "hidden_sizes=64,64", "note=a=b"]) == {
        "learning_rate": "1e-3", "hidden_sizes": "64,64", "note": "a=b"}
    assert config_lib.parse_cli_overrides([]) == {}


@pytest.mark.parametrize("items, message", [
    (["learning_rate"], "--hp: expected key=value, got 'learning_rate'"),
    (["=1e-3"], "--hp: expected key=value, got '=1e-3'"),
    ([" =1"], "--hp: expected key=value, got ' =1'"),
    (["gamma=0.9", "gamma = 0.8"], "--hp: 'gamma' given twice"),
])
def test_parse_cli_overrides_errors(items, message):
    with pytest.raises(ConfigError) as raised:
        config_lib.parse_cli_overrides(items)
    assert str(raised.value) == message


@pytest.mark.parametrize("agent, key, value, message", [
    ("dqn", "layer_init", "he", "layer_init must be glorot or torch"),
    ("dqn", "adam_epsilon", 0.0, "adam_epsilon must be > 0"),
    ("sac", "layer_init", "orthogonal", "layer_init must be glorot or torch"),
    ("td3", "adam_epsilon", -1e-8, "adam_epsilon must be > 0"),
    ("td3", "adam_epsilon", float("nan"), "adam_epsilon.: nan is not a finite number"),
    ("ppo", "observation_clip", 0.0, "observation_clip must be > 0"),
    ("a2c", "reward_clip", -1.0, "reward_clip must be > 0"),
    ("sac", "observation_clip", 0.0, "observation_clip must be > 0"),
])
def test_the_new_settings_refuse_bad_values_in_one_line(agent, key, value, message):
    with pytest.raises(ConfigError, match=message):
        config_lib.apply_overrides(agents.get(agent).config_cls(), {key: value}, "--hp")


def test_old_optimizer_epsilon_names_are_read_with_their_new_names():
    # adam_eps (PPO) and rmsprop_eps (A2C) became adam_epsilon and rmsprop_epsilon, DQN's name.
    ppo = config_lib.apply_overrides(agents.get("ppo").config_cls(), {"adam_eps": 2e-5}, "old preset")
    a2c = config_lib.apply_overrides(agents.get("a2c").config_cls(), {"rmsprop_eps": 3e-5, "n_steps": 7}, "old preset")
    assert (ppo.adam_epsilon, a2c.rmsprop_epsilon, a2c.rollout_length) == (2e-5, 3e-5, 7)
    assert {"adam_epsilon", "rmsprop_epsilon"} <= agents.hparam_names()


@pytest.mark.parametrize("field, value, message", [
    ("layer_init", "xavier", "layer_init must be orthogonal or torch, got 'xavier'"),
    ("log_std_init", float("nan"), "log_std_init must be a finite number, got nan"),
    ("log_std_init", float("inf"), "log_std_init must be a finite number, got inf"),
])
def test_actor_critic_initialization_settings_are_checked(field, value, message):
    from tfrl.agents.ppo.config import PPOConfig

    with pytest.raises(ValueError, match=message):  # config.require's; --hp and presets turn it into one line
        PPOConfig(**{field: value})
    assert PPOConfig(layer_init="torch", log_std_init=-2.0).log_std_init == -2.0


def test_trained_env_steps_round_total_env_steps_up_to_whole_collection_passes():
    from tfrl.agents.dqn.config import DQNConfig
    from tfrl.agents.ppo.config import PPOConfig

    # ppo-lunarlander's rollouts of 16 x 1024 = 16384 env steps: 20000 asked, 2 rollouts trained.
    ppo = PPOConfig(num_envs=16, rollout_length=1024, total_env_steps=20_000)
    assert (ppo.env_steps_per_collect, ppo.trained_env_steps) == (16384, 32768)
    assert DQNConfig(num_envs=4, total_env_steps=1001).trained_env_steps == 1004  # vector steps of 4
    assert DQNConfig(num_envs=4, total_env_steps=1000).trained_env_steps == 1000


@pytest.mark.parametrize("name", ["eval_episodes", "final_eval_episodes"])
def test_evaluations_longer_than_100000_episodes_are_refused(name):
    from tfrl.agents.dqn.config import DQNConfig

    assert getattr(DQNConfig(**{name: 100_000}), name) == 100_000
    with pytest.raises(ValueError, match=f"{name} must be at most 100,000 episodes .* got 1,000,000,000,000"):
        DQNConfig(**{name: 10**12})
