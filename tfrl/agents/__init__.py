"""The agents tfrl can train, by command-line name: one table, the one place an agent is registered.

Each entry names, as "module:attribute" strings so that nothing here imports TensorFlow:
    config    its hyperparameter dataclass (an extension of tfrl.config.LoopConfig)
    learner   its learner class: Learner(config, env_info, runtime, seed), with check_runtime(config, runtime)
    agent     its agent class: Agent(learner, config, env_info, seed), with check_runtime(config, runtime)
    policy    the module whose serving_policy(config, env_info, network=None) is the exported greedy policy
The contracts are in tfrl.agents.core; tfrl.training_loop runs any of them.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from tfrl import config as config_lib
from tfrl.errors import UsageError


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    name: str
    config: str
    learner: str
    agent: str
    policy: str
    actions: tuple[str, ...] = ("discrete",)  # the action spaces it acts in: "discrete" (Discrete), "continuous" (Box)
    images: bool = True  # whether it takes uint8 (image) observations

    @property
    def config_cls(self) -> type:
        return _load(self.config)

    def build(self, config, env_info, runtime, seed: int):
        """The agent (tfrl.agents.core.Agent) with a fresh learner, for one run."""
        learner = _load(self.learner)(config, env_info, runtime, seed)
        return _load(self.agent)(learner, config, env_info, seed)

    def check_runtime(self, config, runtime) -> None:
        """UsageError if `config` cannot train under `runtime`'s strategy; writes nothing."""
        _load(self.learner).check_runtime(config, runtime)
        _load(self.agent).check_runtime(config, runtime)

    def check_env(self, env_info, config=None) -> None:
        """UsageError if the agent cannot act in the env's action space, or `config` cannot take its observations."""
        if env_info.obs_dtype == "uint8" and not self.images:
            raise UsageError(f"--agent={self.name} takes vector observations; {env_info.env_id} has uint8 ones of "
                             f"shape {env_info.obs_shape} (image agents: dqn, ppo, a2c)")
        if config is not None:
            _check_observations(config, env_info)
        kind = "continuous" if env_info.continuous else "discrete"
        if kind not in self.actions:
            others = [spec.name for spec in _AGENTS.values() if kind in spec.actions]
            space = "Box" if env_info.continuous else "Discrete"
            raise UsageError(f"--agent={self.name} acts in {' and '.join(self.actions)} action spaces; {env_info.env_id} "
                             f"has {space} actions: use --agent={' or --agent='.join(others)}")

    @property
    def policy_module(self):
        return importlib.import_module(self.policy)


def _check_observations(config, env_info) -> None:
    torso = getattr(config, "torso", None)
    resolved = torso and config_lib.resolved_torso(torso, env_info.obs_shape, env_info.obs_dtype)
    if env_info.obs_dtype == "uint8" and getattr(config, "normalize_observations", False):
        raise UsageError("normalize_observations: uint8 (image) observations are scaled to [0, 1] inside the "
                         "network, not normalized; set normalize_observations=false")
    if resolved not in (None, "mlp") and getattr(config, "train_in_background", False):
        raise UsageError(f"train_in_background: the {resolved} torso's actor calls the live network, which a train "
                         "call in the background would change under it; set train_in_background=false")


_AGENTS = {spec.name: spec for spec in (
    AgentSpec("dqn", config="tfrl.agents.dqn.config:DQNConfig", learner="tfrl.agents.dqn.learning:DQNLearner",
              agent="tfrl.agents.dqn.agent:DQNAgent", policy="tfrl.agents.dqn.policy"),
    AgentSpec("a2c", config="tfrl.agents.a2c.config:A2CConfig", learner="tfrl.agents.a2c.learning:A2CLearner",
              agent="tfrl.agents.actor_critic.agent:ActorCriticAgent", policy="tfrl.agents.actor_critic.policy",
              actions=("discrete", "continuous")),
    AgentSpec("ppo", config="tfrl.agents.ppo.config:PPOConfig", learner="tfrl.agents.ppo.learning:PPOLearner",
              agent="tfrl.agents.actor_critic.agent:ActorCriticAgent", policy="tfrl.agents.actor_critic.policy",
              actions=("discrete", "continuous")),
    AgentSpec("sac", config="tfrl.agents.sac.config:SACConfig", learner="tfrl.agents.sac.learning:SACLearner",
              agent="tfrl.agents.sac.agent:SACAgent", policy="tfrl.agents.sac.policy", actions=("continuous",),
              images=False),
)}

AGENT_NAMES = tuple(_AGENTS)


def get(name: str) -> AgentSpec:
    if name not in _AGENTS:
        raise UsageError(f"--agent: unknown agent {name!r}; choose one of {', '.join(AGENT_NAMES)}")
    return _AGENTS[name]


def _load(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)
