"""tfrl.run.runs.RunRecord (a run's config.json) and the renamed hyperparameters (tfrl.config.LoopConfig.RENAMED)."""

import json

import pytest
from absl import logging as absl_logging

from tfrl import config as config_lib
from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.dqn.config import DQNConfig
from tfrl.errors import UsageError
from tfrl.hardware.runtime import RuntimeOptions
from tfrl.run import CONFIG_FILE, runs


def _warnings(monkeypatch):
    seen = []
    monkeypatch.setattr(absl_logging, "warning", lambda message, *args: seen.append(message % args))
    monkeypatch.setattr(config_lib, "_warned_renames", set())
    return seen


def test_old_hyperparameter_names_are_read_with_one_warning_each(monkeypatch):
    seen = _warnings(monkeypatch)
    old = {"n_step": 3, "train_freq": 8, "gradient_steps": 2, "target_update_period": 500}
    config = config_lib.apply_overrides(DQNConfig(), old, "preset p")
    assert (config.n_step_return, config.train_period_env_steps, config.gradient_steps_per_train,
            config.target_update_period_env_steps) == (3, 8, 2, 500)
    config_lib.apply_overrides(DQNConfig(), {"n_step": 2}, "preset q")  # warned already: once per name
    assert seen == [f"preset p: hyperparameter {name!r} is now called {new!r}; the old name is read for now"
                    for name, new in DQNConfig.RENAMED.items()]
    a2c = config_lib.apply_overrides(A2CConfig(), {"n_steps": 16}, "--hp")
    assert a2c.rollout_length == 16 and len(seen) == 5


def test_an_old_and_a_new_name_of_one_field_together_are_an_error(monkeypatch):
    _warnings(monkeypatch)
    with pytest.raises(config_lib.ConfigError, match="'n_step_return' is given twice"):
        config_lib.apply_overrides(DQNConfig(), {"n_step_return": 3, "n_step": 2}, "--hp")


def _record(**overrides):
    return runs.RunRecord(agent="dqn", env_id="LunarLander-v3", env_arg="LunarLander-v2", seed=7,
                          config=DQNConfig(n_step_return=3), runtime=RuntimeOptions(xla=True),
                          preset="dqn-lunarlander", keep_checkpoints=0, **overrides)


def test_a_record_survives_config_json_and_gives_back_its_launch_flags(tmp_path):
    runs.write_config(tmp_path, _record())
    record = runs.read_config(tmp_path)
    assert record == _record()
    flags = record.launcher_flags()
    assert (flags["agent"], flags["env"], flags["seed"], flags["xla"], flags["keep_checkpoints"]) == (
        "dqn", "LunarLander-v2", 7, True, 0)
    assert not list(tmp_path.glob(".config.json.tmp-*"))


def test_a_config_json_written_before_the_renames_still_loads(tmp_path, monkeypatch):
    _warnings(monkeypatch)
    (tmp_path / CONFIG_FILE).write_text(json.dumps({
        "agent": "dqn", "env_id": "CartPole-v1", "seed": 0, "hparams": {"n_step": 3, "train_freq": 256},
        "runtime": {"mixed_precision": "float32", "xla": False}}))
    record = runs.read_config(tmp_path)
    assert (record.config.n_step_return, record.config.train_period_env_steps) == (3, 256)
    assert record.differences(runs.RunRecord("dqn", "CartPole-v1", 0, record.config)) == []


@pytest.mark.parametrize("edit, message", [
    ({"hparams": [1, 2]}, "'hparams' must be an object, got [1, 2]"),
    ({"env_id": 7}, "'env_id' must be a string, got 7"),
    ({"runtime": "x"}, "'runtime' must be an object, got 'x'"),
    ({"keep_checkpoints": "three"}, "'keep_checkpoints' must be an integer, got 'three'"),
    ({"runtime": {"xla": "no"}}, "runtime: 'xla' must be true or false, got 'no'"),
    ({"runtime": {"xla": 0}}, "runtime: 'xla' must be true or false, got 0"),
    ({"runtime": {"turbo": True}}, "unknown runtime option 'turbo'"),
    ({"seed": True}, "'seed' must be an integer, got True"),
    ({"agent": None}, "missing 'agent'"),
])
def test_a_hand_edited_config_json_is_one_clear_error(tmp_path, edit, message):
    raw = {**_record().to_json(), **edit}
    if raw["agent"] is None:
        del raw["agent"]
    (tmp_path / CONFIG_FILE).write_text(json.dumps(raw))
    with pytest.raises(UsageError) as raised:
        runs.read_config(tmp_path)
    assert str(raised.value) == f"{tmp_path / CONFIG_FILE}: {message}"
