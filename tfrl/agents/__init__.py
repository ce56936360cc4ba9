"""The agents tfrl can train, by command-line name: one table, the one place an agent is registered.

Each agent's package holds a `spec` module whose SPEC (tfrl.agents.core.AgentSpec) says where its config,
learner, agent and exported policy are, which action spaces and observations it takes, and how much memory a
config of it needs; nothing here imports TensorFlow. Adding an agent is a new package and one line below. The
contracts are in tfrl.agents.core; tfrl.run.training_loop runs any of them.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from tfrl import memory
from tfrl.agents.core import AgentSpec
from tfrl.errors import UsageError

_SPECS = {"dqn": "tfrl.agents.dqn.spec", "qrdqn": "tfrl.agents.qrdqn.spec", "a2c": "tfrl.agents.a2c.spec",
          "ppo": "tfrl.agents.ppo.spec", "sac": "tfrl.agents.sac.spec", "tqc": "tfrl.agents.tqc.spec",
          "crossq": "tfrl.agents.crossq.spec", "td3": "tfrl.agents.td3.spec"}
AGENT_NAMES = tuple(_SPECS)


class RegisteredAgent:
    """A registered agent: its AgentSpec, and what the launcher and the loop ask of it."""

    def __init__(self, spec: AgentSpec):
        self.spec = spec
        self.name = spec.name

    @property
    def config_cls(self) -> type:
        return _load(self.spec.config)

    @property
    def learner_cls(self) -> type:
        """Its learner class (imports TensorFlow)."""
        return _load(self.spec.learner)

    @property
    def policy_module(self):
        return importlib.import_module(self.spec.policy)

    def build(self, config, env_info, runtime, seed: int):
        """The agent (tfrl.agents.core.Agent) with a fresh learner, for one run."""
        learner = self.learner_cls(config, env_info, runtime, seed)
        return _load(self.spec.agent)(learner, config, env_info, seed)

    def check_runtime(self, config, runtime) -> None:
        """UsageError if `config` cannot train under `runtime`'s strategy; writes nothing."""
        self.learner_cls.check_runtime(config, runtime)
        _load(self.spec.agent).check_runtime(config, runtime)

    def check_env(self, env_info, config=None) -> None:
        """UsageError if the agent cannot act in the env's action space or take its observations (with `config`)."""
        if env_info.images and not self.spec.images:
            takers = [name for name in AGENT_NAMES if get(name).spec.images]
            raise UsageError(f"--agent={self.name} takes vector observations; {env_info.env_id} has uint8 images "
                             f"(image agents: {', '.join(takers)})")
        if config is not None:
            self.spec.check_observations(config, env_info)
        kind = env_info.action_kind
        if kind not in self.spec.actions:
            others = [name for name in AGENT_NAMES if kind in get(name).spec.actions]
            space = {"continuous": "Box", "discrete": "Discrete", "multi_discrete": "MultiDiscrete",
                     "hybrid": f"{env_info.action_container} (hybrid)"}[kind]
            reason = f" ({self.spec.refusals[kind]})" if kind in self.spec.refusals else ""
            raise UsageError(f"--agent={self.name} acts in {' and '.join(self.spec.actions)} action spaces; "
                             f"{env_info.env_id} has {space} actions{reason}: use "
                             f"--agent={' or --agent='.join(others)}")

    def check_memory(self, config, env_info, vector_mode: str = "sync") -> None:
        """UsageError if a run of `config` would need more memory than is available (tfrl.memory)."""
        memory.check(self.spec.estimate_memory(config, env_info, vector_mode))

    def convolves(self, config, env_info) -> bool:
        return self.spec.convolves(config, env_info)

    def check_actors(self, config, env_info, settings) -> None:
        """UsageError unless `config` can step its envs in rollout actors as `settings` (a
        tfrl.rollout_actors.ActorSettings) say (count 0: in this process)."""
        actors = settings.count
        if not actors:
            return
        if self.spec.rollout_actors is None:
            takers = [name for name in AGENT_NAMES if get(name).spec.rollout_actors]
            raise UsageError(f"--actors: --agent={self.name} steps its envs in the learner's process; rollout "
                             f"actors run {', '.join(takers)}")
        if actors > config.num_envs:
            raise UsageError(f"--actors={actors} is more than num_envs={config.num_envs}: each actor steps at least "
                             "one env (raise --num_envs)")
        self.spec.check_actors(config, settings)
        if self.convolves(config, env_info):
            raise UsageError("--actors: this policy's convolutions act through TensorFlow in the learner's process, "
                             "not in NumPy copies the actors could hold; train image observations without --actors")

    def rollout_actors(self, agent, env_spec, settings, seed: int, vector_mode: str, on_episode):
        """The agent's rollout actors (tfrl.rollout_actors), started as `settings` say."""
        return _load(self.spec.rollout_actors).for_agent(agent, env_spec, settings, seed, vector_mode, on_episode)


def get(name: str) -> RegisteredAgent:
    if name not in _SPECS:
        raise UsageError(f"--agent: unknown agent {name!r}; choose one of {', '.join(AGENT_NAMES)}")
    return RegisteredAgent(importlib.import_module(_SPECS[name]).SPEC)


def hparam_names() -> set[str]:
    """Every hyperparameter name of every agent, old names included (for a launcher's did-you-mean)."""
    names: set[str] = set()
    for name in AGENT_NAMES:
        config_cls = get(name).config_cls
        names |= {f.name for f in dataclasses.fields(config_cls)} | set(getattr(config_cls, "RENAMED", {}))
    return names


def _load(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)
