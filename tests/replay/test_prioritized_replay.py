"""Prioritized replay (tfrl.replay.prioritized): sampling probabilities, strata, importance-sampling weights and
priority updates worked out by hand; the weighted DQN loss and its TD errors by hand; a checkpoint round trip;
and a DQN run with it that resumes."""

import json

import keras
import numpy as np
import pytest

from tfrl import agents
from tfrl.agents.dqn.agent import importance_sampling_beta
from tfrl.agents.dqn.config import DQNConfig
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.replay.prioritized import PrioritizedReplay, SumTree
from tfrl.run import training_loop

import test_dqn_learning as hand  # the hand-weighted Q-networks and batch


def test_the_sum_tree_finds_the_leaf_of_each_prefix_sum():
    tree = SumTree(4)
    tree.set(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))  # prefix sums: [0,1) [1,3) [3,6) [6,10)
    assert tree.root == 10.0
    targets = [0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99]
    np.testing.assert_array_equal(tree.find(np.array(targets)), [0, 0, 1, 1, 2, 2, 3, 3])
    tree.set(np.array([1, 1]), np.array([0.5, 0.5]))  # a slot set twice in one call
    assert tree.root == 8.5 and tree.find(np.array([1.4]))[0] == 1 and tree.find(np.array([1.5]))[0] == 2


def _replay_with_priorities(alpha=0.5):
    """Four transitions whose |TD errors| are 1, 4, 9, 16: with alpha 0.5 their priorities are 1, 2, 3, 4."""
    replay = PrioritizedReplay(capacity=4, obs_shape=(1,), seed=0, alpha=alpha, epsilon=1e-12)
    obs = np.arange(4, dtype=np.float32)[:, None]
    replay.add(obs, np.zeros(4, np.int32), np.zeros(4, np.float32), np.ones(4, np.float32), obs)
    replay.update_priorities(np.arange(4), np.array([1.0, 4.0, 9.0, 16.0]))
    return replay


def test_probabilities_follow_priorities_to_the_power_alpha():
    replay = _replay_with_priorities()
    # P(i) = p_i / sum p = [1, 2, 3, 4] / 10
    np.testing.assert_allclose(replay.probabilities(), [0.1, 0.2, 0.3, 0.4], rtol=1e-9)
    assert replay.max_priority == pytest.approx(4.0)


def test_each_draw_of_a_batch_falls_in_its_own_stratum():
    replay = _replay_with_priorities()
    # B = 10 strata of width 1 over the total 10: strata 0 | 1, 2 | 3, 4, 5 | 6..9 -> counts 1, 2, 3, 4 exactly,
    # whatever the uniform draws inside the strata.
    for _ in range(5):
        batch = replay.sample(batch_size=10, num_batches=3)
        assert batch["index"].shape == (3, 10)
        for row in batch["index"]:
            np.testing.assert_array_equal(np.bincount(row, minlength=4), [1, 2, 3, 4])
        np.testing.assert_array_equal(batch["obs"][..., 0], batch["index"])  # the fields of the drawn slots


@pytest.mark.parametrize("beta, expected", [
    (1.0, [1.0, 1 / 2, 1 / 3, 1 / 4]),  # w_i = (p_min / p_i)^beta = (1 / p_i)^1
    (0.5, [1.0, 2 ** -0.5, 3 ** -0.5, 4 ** -0.5]),
    (0.0, [1.0, 1.0, 1.0, 1.0]),
])
def test_importance_sampling_weights_by_hand(beta, expected):
    replay = _replay_with_priorities()
    batch = replay.sample(batch_size=10, num_batches=1, beta=beta)
    for index, weight in zip(batch["index"][0], batch["weight"][0]):
        assert weight == pytest.approx(expected[index], rel=1e-6)
    # The same from the definition: w_i = (N P(i))^-beta / max_k (N P(k))^-beta.
    p = replay.probabilities()
    definition = (4 * p) ** -beta / np.max((4 * p) ** -beta)
    np.testing.assert_allclose(definition, expected, rtol=1e-9)


def test_new_transitions_get_the_largest_priority_seen():
    replay = _replay_with_priorities()
    replay.add(np.zeros((1, 1), np.float32), np.zeros(1, np.int32), np.zeros(1, np.float32), np.ones(1, np.float32),
               np.zeros((1, 1), np.float32))  # overwrites slot 0 (capacity 4) with priority 4
    np.testing.assert_allclose(replay.probabilities(), np.array([4, 2, 3, 4]) / 13, rtol=1e-9)


def test_beta_is_annealed_to_one_over_training():
    config = DQNConfig(total_env_steps=1000, importance_sampling_start=0.4)
    assert [importance_sampling_beta(step, config) for step in (0, 500, 1000, 2000)] == pytest.approx([0.4, 0.7, 1, 1])


def test_priorities_survive_a_checkpoint_round_trip():
    replay = _replay_with_priorities()
    arrays, state = replay.checkpoint_state()
    json.dumps(state)  # the state is JSON (tfrl.run.checkpoints writes it so)
    copy = PrioritizedReplay(capacity=4, obs_shape=(1,), seed=7, alpha=0.5, epsilon=1e-12)
    copy.restore_checkpoint_state(arrays, state)
    np.testing.assert_allclose(copy.probabilities(), replay.probabilities())
    assert copy.max_priority == replay.max_priority
    a, b = replay.sample(4, 2, beta=0.5), copy.sample(4, 2, beta=0.5)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    arrays["priority"] = arrays["priority"][:3]
    with pytest.raises(ValueError, match="3 priorities do not fit its 4 transitions"):
        copy.restore_checkpoint_state(arrays, state)


def test_the_weighted_loss_and_the_td_errors_by_hand():
    runtime = Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")
    learner = hand._hand_learner(runtime, double_dqn=True, prioritized_replay=True)
    batch = {**hand._stack(hand.HAND_BATCH, 1), "weight": np.array([[0.5, 1.0]], np.float32)}
    # Double-DQN targets 3.7 and 0 against Q(s, a) = 4 and 5: errors -0.3 and -5, huber 0.045 and 4.5;
    # weighted: (0.5 * 0.045 + 1 * 4.5) / 2 = 2.26125
    update = learner.update(hand.ReplayBatch(batch, False))
    assert update.metrics["loss"] == pytest.approx(2.26125, rel=1e-6)
    np.testing.assert_allclose(update.row_errors, [[0.3, 5.0]], rtol=1e-5)


def test_a_dqn_run_with_prioritized_replay_checkpoints_its_priorities_and_resumes(tmp_path):
    config = DQNConfig(total_env_steps=1200, hidden_sizes=(16,), batch_size=16, replay_capacity=500,
                       learning_starts=200, gradient_steps_per_train=2, eval_interval=0, final_eval_episodes=2,
                       log_interval=200, checkpoint_interval=400, prioritized_replay=True)
    runtime = Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")
    polls = []
    stopped = training_loop.train(agents.get("dqn"), config, "CartPole-v1", 0, runtime, tmp_path, training_loop.LoopOptions(
        progress_bar=False, stop_requested=lambda: polls.append(1) or len(polls) > 700))
    assert stopped["kind"] == "stopped" and stopped["env_step"] == 700
    with np.load(tmp_path / "checkpoints" / f"ckpt-{stopped['checkpoint']}.npz") as arrays:
        priority = arrays["priority"]
    assert len(priority) == 500 and np.all(priority > 0) and len(np.unique(priority)) > 10  # updated from TD errors
    final = training_loop.train(agents.get("dqn"), config, "CartPole-v1", 0, runtime, tmp_path,
                                training_loop.LoopOptions(progress_bar=False))
    assert final["kind"] == "final_eval" and final["env_step"] == 1200


# --- train_in_background (tfrl.agents.dqn.agent): the learner one train call behind the actor ---------------

def _agent(background: bool):
    from tfrl.agents.dqn.agent import DQNAgent
    from tfrl.agents.dqn.learning import DQNLearner
    from tfrl.envs import EnvInfo

    config = DQNConfig(hidden_sizes=(8,), batch_size=8, replay_capacity=64, learning_starts=0,
                       train_period_env_steps=4, gradient_steps_per_train=2, train_in_background=background)
    info = EnvInfo("CartPole-v1", (4,), 2)
    runtime = Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")
    agent = DQNAgent(DQNLearner(config, info, runtime), config, info, seed=0)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(32, 4)).astype(np.float32)
    agent.replay.add(obs, rng.integers(0, 2, 32).astype(np.int32), rng.normal(size=32).astype(np.float32),
                     np.full(32, 0.9, np.float32), obs)
    return agent, obs


def test_in_the_background_the_actor_gets_each_call_s_weights_one_train_call_later():
    agent, obs = _agent(background=True)
    initial = agent._mirror(obs).copy()
    agent.train(4)  # call 1 runs in the background
    agent.training._calls.in_flight.result()  # it has finished, but the actor has not taken its weights yet
    np.testing.assert_array_equal(agent._mirror(obs), initial)
    after_call_1 = agent.learner.online(obs).numpy()
    agent.train(8)  # takes call 1's weights, then starts call 2
    np.testing.assert_allclose(agent._mirror(obs), after_call_1, rtol=1e-5, atol=1e-6)
    agent.settle()  # call 2's weights
    np.testing.assert_allclose(agent._mirror(obs), agent.learner.online(obs).numpy(), rtol=1e-5, atol=1e-6)
    assert int(agent.learner.gradient_steps.numpy()) == 4


def test_in_the_background_the_learner_makes_the_same_updates_on_the_same_batches():
    """The lag changes what the actor does, not what a train call computes from its batch."""
    agents = [_agent(background)[0] for background in (False, True)]
    agents[1].learner.online.set_weights(agents[0].learner.online.get_weights())
    agents[1].learner.target.set_weights(agents[0].learner.target.get_weights())
    for agent in agents:
        for env_step in (4, 8, 12):
            agent.train(env_step)
        agent.settle()
    for a, b in zip(agents[0].learner.online.get_weights(), agents[1].learner.online.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_run_in_the_background_is_reproducible(tmp_path):
    config = DQNConfig(total_env_steps=1000, hidden_sizes=(16,), batch_size=16, replay_capacity=500,
                       learning_starts=200, gradient_steps_per_train=2, eval_interval=500, eval_episodes=2,
                       final_eval_episodes=2, log_interval=250, checkpoint_interval=0, train_in_background=True)
    runtime = Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        keras.utils.set_random_seed(3)  # the network's initialization (the launcher sets it so)
        final = training_loop.train(agents.get("dqn"), config, "CartPole-v1", 3, runtime, tmp_path / name,
                                    training_loop.LoopOptions(progress_bar=False))
        records = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        runs.append([{k: v for k, v in r.items() if k not in ("wall_time_s", "env_steps_per_s")} for r in records])
        assert final["gradient_steps"] == 2 * ((1000 - 200) // 4 + 1)
    assert runs[0] == runs[1]
