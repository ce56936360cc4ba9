"""configs/ (the user's examples): every preset loads and applies to its agent's config, every search space
resolves against it, and the copy of the headline preset is still the headline's."""

import json
import pathlib

import pytest

from tfrl import agents, config as config_lib, presets
from tfrl.tuning import spaces

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"
PRESET_FILES = sorted(CONFIGS.glob("*.json"))
SPACE_FILES = sorted((CONFIGS / "spaces").glob("*.json"))


def test_the_folder_holds_presets_and_spaces():
    assert len(PRESET_FILES) >= 2 and len(SPACE_FILES) >= 1


@pytest.mark.parametrize("path", PRESET_FILES, ids=lambda p: p.name)
def test_every_preset_applies_to_its_agents_config(path):
    preset = presets.load_file(path)
    config = config_lib.apply_overrides(agents.get(preset.agent).config_cls(), preset.hparams, str(path))
    for name, value in preset.hparams.items():
        assert config_lib.to_dict(config)[name] == value
    assert presets.find(preset.agent, preset.env_ids[0], name=preset.name, dirs=presets.search_dirs(CONFIGS)).source \
        == preset.source


def test_the_folder_is_searched_first_for_the_headline():
    found = presets.find("dqn", "LunarLander-v3", dirs=presets.search_dirs(CONFIGS))
    assert found.source == str(CONFIGS / "dqn-lunarlander.json")
    builtin = json.loads((presets.builtin_dir() / "dqn-lunarlander.json").read_text())
    assert dict(found.hparams) == builtin["hparams"] and dict(found.runtime) == builtin["runtime"]


@pytest.mark.parametrize("path", SPACE_FILES, ids=lambda p: p.name)
def test_every_search_space_resolves_over_its_agents_space(path):
    agent = path.stem.split("-")[0]
    overlay = spaces.read_file(str(path))
    space = spaces.resolve(agent, agents.get(agent).config_cls, overlay, {})
    for name, entry in overlay.items():
        assert (name not in space) if entry is None else space[name] == entry
