"""The CrossQ agent: SAC's (exploration with the squashed Gaussian, the replay, the noise each batch carries),
acting with a NumPy mirror that applies the actor's renormalization in evaluation mode."""

from __future__ import annotations

from tfrl.agents.crossq import policy as crossq_policy
from tfrl.agents.crossq.mirror import NumpyRenormActor
from tfrl.agents.sac.agent import SACAgent


class CrossQAgent(SACAgent):
    NAME = "CrossQ"
    MIRROR = NumpyRenormActor
    POLICY = crossq_policy
