"""benchmarks/step_arithmetic.py's recipes: which products, passes and terms a gradient step is charged, counted
with every timed operation standing in for one unit of time."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import step_arithmetic  # noqa: E402

from tfrl.agents.crossq.config import CrossQConfig  # noqa: E402
from tfrl.agents.qrdqn.config import QRDQNConfig  # noqa: E402
from tfrl.agents.tqc.config import TQCConfig  # noqa: E402
from tfrl.envs import EnvInfo  # noqa: E402

CARTPOLE = EnvInfo("CartPole-v1", (4,), 2)
PENDULUM = EnvInfo("Pendulum-v1", (3,), 0, action_shape=(1,), action_low=(-2.0,), action_high=(2.0,))


@pytest.fixture
def units(monkeypatch):
    """Each timed operation takes 1: the recipes' sums become counts."""
    monkeypatch.setattr(step_arithmetic, "_median_s", lambda fn, repeats=30: (fn(), 1.0)[1])


def test_a_dense_chain_is_charged_its_passes_and_two_products_a_layer_backward(units):
    # 2 layers; per layer: 3 forward passes, 1 full backward (2 products), 1 input gradient (1 product).
    assert step_arithmetic._matmuls_s(4, [3, 5, 2], passes=3, backward=1, input_grads=1) == 2 * (3 + 2 + 1)
    assert step_arithmetic._matmuls_s(4, [3, 5, 2], passes=0, backward=0, input_grads=0) == 0


def test_each_agent_s_step_is_charged_its_networks_passes(units):
    # QR-DQN, 2 layers: online on s and target on s' (2 passes) + backward (2) a layer, Adam 1; the loss 1.
    qrdqn = QRDQNConfig(hidden_sizes=(8,), num_quantiles=3)
    assert step_arithmetic.qrdqn_arithmetic_s(qrdqn, CARTPOLE) == (2 * (2 + 2) + 1, 1)
    # TQC, C = 2 critics of 2 layers: 3C passes + C backward (2) + C input gradients (1) a layer; the actor's
    # 2 layers: 2 passes + 1 backward (2); Adam 1; the loss once per critic.
    tqc = TQCConfig(hidden_sizes=(8,), num_critics=2, num_quantiles=5)
    assert step_arithmetic.tqc_arithmetic_s(tqc, PENDULUM) == (2 * (6 + 4 + 2) + 2 * (2 + 2) + 1, 2)
    # CrossQ, policy_delay 2, 2-layer critics and actor: the joint pass (2 critics, forward and backward on 2B
    # rows: 2 + 4), the actor's loss through the critics (2/2 + 2/2), the actor (1 + 1/2 passes, 1/2 backward:
    # 1); Adam 1; renormalizations: 2 critics x 2 layers, the actor's 2 layers / 2.
    crossq = CrossQConfig(hidden_sizes=(8,), critic_hidden_sizes=(8,), policy_delay=2)
    products, norms = step_arithmetic.crossq_arithmetic_s(crossq, PENDULUM)
    assert products == pytest.approx(2 * (2 + 4) + 2 * (1 + 1) + 2 * (1.5 + 1) + 1)
    assert norms == pytest.approx(2 * 2 + 2 * 0.5)
