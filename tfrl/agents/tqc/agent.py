"""The TQC agent: SAC's (the squashed Gaussian actor's exploration, the replay, the noise each batch carries, its
share of a checkpoint) with TQC's learner."""

from __future__ import annotations

from tfrl.agents.sac.agent import SACAgent


class TQCAgent(SACAgent):
    NAME = "TQC"
