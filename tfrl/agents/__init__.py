"""The agents tfrl can train, by command-line name."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

from tfrl.errors import UsageError


@dataclasses.dataclass(frozen=True)
class AgentEntry:
    config_cls: type
    loop_module: str  # the module with train(); imported (with TensorFlow) only when train is used

    @property
    def train(self) -> Callable[..., dict]:
        """train(config, env_id, seed, runtime, run_dir, vector_mode, progress_bar, stop_requested, keep_checkpoints)."""
        return importlib.import_module(self.loop_module).train

    @property
    def check_runtime(self) -> Callable[..., None]:
        """check_runtime(config, runtime): UsageError if the agent cannot train under that runtime (strategy)."""
        return importlib.import_module(self.loop_module).check_runtime


_AGENTS = {
    # name: (module with the config class, config class name, module with train() and check_runtime())
    "dqn": ("tfrl.agents.dqn.config", "DQNConfig", "tfrl.agents.dqn.loop"),
    "a2c": ("tfrl.agents.a2c.config", "A2CConfig", "tfrl.agents.a2c.loop"),
    "ppo": ("tfrl.agents.ppo.config", "PPOConfig", "tfrl.agents.ppo.loop"),
}

AGENT_NAMES = tuple(_AGENTS)


def get(name: str) -> AgentEntry:
    if name not in _AGENTS:
        raise UsageError(f"--agent: unknown agent {name!r}; choose one of {', '.join(AGENT_NAMES)}")
    config_module, config_cls, loop_module = _AGENTS[name]
    config_cls: Any = getattr(importlib.import_module(config_module), config_cls)
    return AgentEntry(config_cls=config_cls, loop_module=loop_module)
