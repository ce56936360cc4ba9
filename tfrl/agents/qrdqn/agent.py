"""The QR-DQN agent: DQN's (epsilon-greedy acting on the mean quantiles, n-step transitions, the replay, the train
and target-update deadlines, its share of a checkpoint), with QR-DQN's network and policy."""

from __future__ import annotations

from tfrl.agents.dqn.agent import DQNAgent
from tfrl.agents.qrdqn import policy as qrdqn_policy


class QRDQNAgent(DQNAgent):
    POLICY = qrdqn_policy
