"""Tests for memory (lstm_units) in A2C and PPO: the NumPy mirror of the LSTM step, training on sequences (a loss
computed step by step in NumPy), the rollout replaying the actor's computation, the partially observable envs,
the bad inputs, and the stateful policy objects.

Learners are built on CPU:0 without tfrl.hardware.runtime.apply(), so they leave the process's TF configuration alone.
"""


import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from fresh_process import run_json_script

from tfrl import config as config_lib, envs
from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.a2c.learning import A2CLearner
from tfrl.agents.actor_critic import recurrent
from tfrl.agents.actor_critic.agent import ActorCriticAgent
from tfrl.agents.actor_critic.rollout import Rollout
from tfrl.agents.ppo.config import PPOConfig
from tfrl.agents.ppo.learning import PPOLearner
from tfrl.envs import EnvInfo
from tfrl.envs.observations import ObsSpec
from tfrl.errors import UsageError
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models.policy_memory import StatefulPolicy
from tfrl.run import evaluation

TWO_ACTIONS = EnvInfo("test", (2,), 2)


def _runtime() -> Runtime:
    return Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")


def _randomize(model, seed: int, scale: float = 0.7) -> None:
    rng = np.random.default_rng(seed)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(0, scale, variable.shape).astype(np.float32))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _lstm_by_hand(weights, x, h, c):
    """Keras' LSTMCell, gate by gate (input, forget, cell, output), written out for the tests."""
    kernel, recurrent_kernel, bias = weights
    u = h.shape[-1]
    z = x @ kernel + h @ recurrent_kernel + bias
    i, f, g, o = z[..., :u], z[..., u:2 * u], z[..., 2 * u:3 * u], z[..., 3 * u:]
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c), c


# --- the mirror --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shared_torso, gaussian, hidden, post", [
    (False, False, (5,), ()), (True, False, (5,), ()), (False, True, (5,), ()),
    (False, False, (), (5, 4)), (True, True, (5,), (4,))])  # the LSTM first, as sb3-contrib; layers on both sides
def test_the_numpy_step_equals_the_keras_step_network(shared_torso, gaussian, hidden, post):
    model = recurrent.recurrent_actor_critic_network(ObsSpec.flat((3,), "float32"), 4, hidden, lstm_units=6,
                                                     shared_torso=shared_torso, log_std_size=2 if gaussian else 0,
                                                     post_lstm_sizes=post)
    posts = [layer.name for layer in model.layers if "_post_" in layer.name]
    assert len(posts) == len(post) * (1 if shared_torso else 2)
    assert model.get_layer(recurrent.branches(shared_torso)[0]).kernel.shape[0] == (hidden or (3,))[-1]
    _randomize(model, seed=1)
    size = recurrent.state_size(6, shared_torso)
    assert model.outputs[2].shape[-1] == size == (12 if shared_torso else 24)
    rng = np.random.default_rng(2)
    obs, state = rng.normal(size=(7, 3)).astype(np.float32), rng.normal(size=(7, size)).astype(np.float32)
    mirror = recurrent.NumpyRecurrentActorCritic(model)
    for got, want in zip(mirror(obs, state), model([obs, state])):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    # An update with other weights reaches the mirror (a learner's returned weights).
    _randomize(model, seed=3)
    mirror.update([v.numpy() for v in model.trainable_variables])
    np.testing.assert_allclose(mirror(obs, state)[2], model([obs, state])[2].numpy(), rtol=1e-5, atol=1e-6)


# --- training on sequences: one PPO minibatch of 2 envs x 4 steps, an episode starting in the middle ------------

T, N = 4, 2


def _sequence_case(seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = T * N  # row t * N + n, as a Rollout
    starts = np.zeros((T, N), np.float32)
    starts[0, 0] = 1.0  # env 0 starts an episode at t = 0 ...
    starts[2, 0] = 1.0  # ... and another at t = 2; env 1 continues one episode from the previous rollout
    states = rng.normal(size=(T, N, 4)).astype(np.float32)  # only t = 0 is read; the rest must not matter
    states[0, 0] = 0.0  # the actor's state where an episode started
    return dict(obs=rng.normal(size=(rows, 2)).astype(np.float32), actions=rng.integers(0, 2, rows).astype(np.int32),
                advantages=rng.normal(size=rows).astype(np.float32), returns=rng.normal(size=rows).astype(np.float32),
                log_probs=np.log(rng.uniform(0.2, 0.8, rows)).astype(np.float32),
                states=states.reshape(rows, 4), starts=starts.reshape(rows))


def _numpy_forward(network, case, honour_starts=True):
    """(logits [8, 2], values [8]) of the case's rows, the LSTMs run step by step in NumPy from each env's stored
    state at t = 0, zeroed where an episode starts."""
    layer = {v.path: v.numpy() for v in network.trainable_variables}
    lstm = lambda name: (layer[f"{name}/kernel"], layer[f"{name}/recurrent_kernel"], layer[f"{name}/bias"])
    obs, states, starts = case["obs"].reshape(T, N, 2), case["states"].reshape(T, N, 4), case["starts"].reshape(T, N)
    logits, values = np.zeros((T, N, 2)), np.zeros((T, N))
    for n in range(N):
        h_pi, c_pi, h_v, c_v = np.split(states[0, n], 4)  # each [1]: lstm_units = 1
        for t in range(T):
            if starts[t, n] and honour_starts:
                h_pi, c_pi, h_v, c_v = (np.zeros(1),) * 4
            pi_x = np.tanh(obs[t, n] @ layer["policy_torso_0/kernel"] + layer["policy_torso_0/bias"])
            v_x = np.tanh(obs[t, n] @ layer["value_torso_0/kernel"] + layer["value_torso_0/bias"])
            h_pi, c_pi = _lstm_by_hand(lstm("policy_lstm"), pi_x, h_pi, c_pi)
            h_v, c_v = _lstm_by_hand(lstm("value_lstm"), v_x, h_v, c_v)
            logits[t, n] = h_pi @ layer["policy_head/kernel"] + layer["policy_head/bias"]
            values[t, n] = (h_v @ layer["value_head/kernel"] + layer["value_head/bias"])[0]
    return logits.reshape(-1, 2), values.reshape(-1)


def _numpy_ppo_loss(network, case, honour_starts=True, clip=0.2, value_coef=0.5, entropy_coef=0.01):
    """The PPO loss of the case's 8 rows (one minibatch), advantages normalized over it."""
    logits, values = _numpy_forward(network, case, honour_starts)
    log_pi = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ratio = np.exp(log_pi[np.arange(T * N), case["actions"]] - case["log_probs"])
    a = case["advantages"]
    a = (a - a.mean()) / (a.std() + 1e-8)
    policy_loss = -np.mean(np.minimum(ratio * a, np.clip(ratio, 1 - clip, 1 + clip) * a))
    value_loss = np.mean((case["returns"] - values) ** 2)
    entropy = -np.mean(np.sum(np.exp(log_pi) * log_pi, -1))
    return policy_loss + value_coef * value_loss - entropy_coef * entropy


def _ppo_on_case(case) -> tuple[PPOLearner, dict]:
    config = PPOConfig(num_envs=N, rollout_length=T, batch_size=T * N, n_epochs=1, hidden_sizes=(3,), lstm_units=1,
                       entropy_coef=0.01)
    learner = PPOLearner(config, TWO_ACTIONS, _runtime(), seed=0)
    _randomize(learner.network, seed=4, scale=1.0)
    reference = _numpy_ppo_loss(learner.network, case), _numpy_ppo_loss(learner.network, case, honour_starts=False)
    update = learner.update(Rollout(case["obs"], case["actions"], case["advantages"], case["returns"],
                                    case["log_probs"], 0, case["states"], case["starts"]))
    return learner, {"loss": update.metrics["loss"], "by_hand": reference[0], "ignoring_starts": reference[1]}


def test_the_sequence_loss_equals_the_one_computed_step_by_step_in_numpy():
    _, losses = _ppo_on_case(_sequence_case())
    assert losses["loss"] == pytest.approx(losses["by_hand"], rel=1e-5, abs=1e-6)
    # The episode start in the middle matters: ignoring it gives another loss (so this test can fail).
    assert abs(losses["by_hand"] - losses["ignoring_starts"]) > 1e-3


def test_only_each_sequences_first_stored_state_is_read():
    case = _sequence_case()
    other = dict(case, states=case["states"].copy())
    other["states"].reshape(T, N, 4)[1:] = 9.0  # the states stored after the first step of each sequence
    assert _ppo_on_case(other)[1]["loss"] == pytest.approx(_ppo_on_case(case)[1]["loss"], rel=1e-6)


def test_sequence_minibatches_hold_whole_sequences_in_time_order():
    # T = 4, N = 2, L = 2: env 0's sequences are rows (0, 2) and (4, 6), env 1's (1, 3) and (5, 7).
    assert recurrent.sequence_rows(4, 2, 2).tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    batches = recurrent.sequence_minibatches(seed=3, update=0, n_epochs=2, rollout_length=4, num_envs=2,
                                             sequence_length=2, batch_size=4)
    assert batches.shape == (4, 4)  # 2 epochs x 2 minibatches of 2 sequences
    sequences = {(0, 2), (1, 3), (4, 6), (5, 7)}
    for epoch in (batches[:2], batches[2:]):
        seen = [tuple(pair) for batch in epoch for pair in batch.reshape(2, 2)]
        assert set(seen) == sequences and len(seen) == 4
    np.testing.assert_array_equal(batches, recurrent.sequence_minibatches(3, 0, 2, 4, 2, 2, 4))


def test_a2c_trains_on_each_envs_whole_rollout_as_one_sequence():
    config = A2CConfig(num_envs=N, rollout_length=T, hidden_sizes=(3,), lstm_units=1, entropy_coef=0.01)
    learner = A2CLearner(config, TWO_ACTIONS, _runtime())
    _randomize(learner.network, seed=4, scale=1.0)
    case = _sequence_case()
    logits, values = _numpy_forward(learner.network, case)
    log_pi = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    # A2C: -mean(log pi(a|s) A) + 0.5 mean((G - V)^2) - 0.01 mean(H), advantages as they are.
    expected = (-np.mean(log_pi[np.arange(T * N), case["actions"]] * case["advantages"])
                + 0.5 * np.mean((case["returns"] - values) ** 2)
                + 0.01 * np.mean(np.sum(np.exp(log_pi) * log_pi, -1)))
    update = learner.update(Rollout(case["obs"], case["actions"], case["advantages"], case["returns"],
                                    case["log_probs"], 0, case["states"], case["starts"]))
    assert update.metrics["loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


# --- the actor and its rollout --------------------------------------------------------------------------------

@pytest.mark.parametrize("env_id, hidden, post", [("tfrl/CartPoleNoVel-v1", (8,), ()), ("tfrl/GoalGrid-v0", (8,), ()),
                                                  ("tfrl/CartPoleNoVel-v1", (), (8,)), ("tfrl/GoalGrid-v0", (), (8,))])
def test_training_replays_the_actors_values_from_the_stored_states(env_id, hidden, post):
    """The rollout's stored states and starts let the sequence forward pass recompute exactly the V(s_t) the NumPy
    actor had, across episode ends (CartPoleNoVel's random policy ends episodes every ~20 steps, GoalGrid's within
    20), with one observation or a Dict of three, the LSTM after a torso or first."""
    config = PPOConfig(num_envs=3, rollout_length=64, batch_size=64, n_epochs=1, hidden_sizes=hidden, lstm_units=5,
                       post_lstm_sizes=post)
    vector_env = envs.make_vector_env(env_id, 3, seed=0)
    try:
        info = envs.env_info(vector_env, env_id)
        learner = PPOLearner(config, info, _runtime(), seed=0)
        _randomize(learner.network, seed=5, scale=0.5)
        agent = ActorCriticAgent(learner, config, info, seed=0)
        agent.reload_weights()
        agent.collect(envs.VectorStepper(vector_env, on_episode=lambda *a: None))
        storage = agent._storage  # noqa: SLF001 - what the actor recorded
        assert storage.starts[0].tolist() == [1.0, 1.0, 1.0] and 1 <= storage.starts[1:].sum() < 64 * 3
        rows = recurrent.sequence_rows(64, 3, 64).reshape(-1)
        flat = lambda a: a.reshape(64 * 3, *a.shape[2:])[rows]
        obs = flat(storage.obs)
        obs = ({key: tf.constant(obs[key]) for key in obs.dtype.names} if obs.dtype.names else tf.constant(obs))
        _, values = recurrent.SequenceForward(learner.network, 64, False)(
            obs, tf.constant(flat(storage.states)), tf.constant(flat(storage.starts)))
        np.testing.assert_allclose(values.numpy(), flat(storage.values), rtol=1e-4, atol=1e-5)
    finally:
        vector_env.close()


# --- the envs -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("env_id, original, keep, limit", [
    ("tfrl/CartPoleNoVel-v1", "CartPole-v1", [0, 2], 500), ("tfrl/PendulumNoVel-v1", "Pendulum-v1", [0, 1], 200)])
def test_the_partially_observable_envs_show_the_positions_only(env_id, original, keep, limit):
    partial, full = gym.make(env_id), gym.make(original)
    obs, _ = partial.reset(seed=7)
    full_obs, _ = full.reset(seed=7)
    np.testing.assert_array_equal(obs, full_obs[keep])
    assert partial.observation_space.shape == (2,) and partial.spec.max_episode_steps == limit
    for _ in range(5):
        action = full.action_space.sample()
        obs, reward, *_ = partial.step(action)
        full_obs, full_reward, *_ = full.step(action)
        np.testing.assert_array_equal(obs, full_obs[keep])
        assert reward == full_reward


# --- bad input ------------------------------------------------------------------------------------------------

def test_lstm_units_is_refused_by_the_off_policy_agents_without_a_sequence_learner():
    from tfrl import agents

    with pytest.raises(config_lib.ConfigError, match="lstm_units: .*single transitions of its replay"):
        config_lib.apply_overrides(agents.get("td3").config_cls(), {"lstm_units": 64, "sequence_length": 8}, "--hp")


@pytest.mark.parametrize("overrides, message", [
    ({"lstm_units": -1}, "lstm_units must be >= 0"),
    ({"sequence_length": 16}, "sequence_length applies to a policy with memory only"),
    ({"post_lstm_sizes": (64,)}, "post_lstm_sizes applies to a policy with memory only"),
    ({"hidden_sizes": ()}, "hidden_sizes must be positive layer sizes"),
    ({"lstm_units": 8, "post_lstm_sizes": (0,)}, "post_lstm_sizes must be positive layer sizes"),
    ({"lstm_units": 8, "rollout_length": 32, "batch_size": 64, "sequence_length": 24},
     "rollout_length = 32 must be a multiple of sequence_length = 24"),
    ({"lstm_units": 8, "num_envs": 3, "rollout_length": 32, "batch_size": 48, "sequence_length": 32},
     "batch_size = 48 must be a multiple of sequence_length = 32")])
def test_bad_memory_settings_are_refused(overrides, message):
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.apply_overrides(PPOConfig(), overrides, "--hp")


def test_the_default_sequence_is_the_rollout_or_the_batch_if_shorter():
    assert PPOConfig(lstm_units=8).sequence_steps == 64  # rollout 256, batch 64
    assert PPOConfig(lstm_units=8, rollout_length=32, batch_size=256, num_envs=8).sequence_steps == 32


def test_an_observation_field_named_state_is_refused_with_memory():
    from tfrl.agents.actor_critic.spec import check_observations

    vector_env = envs.make_vector_env("tfrl/MaskedPick-v0", 1, seed=0)  # Dict observations {"state", "action_mask"}
    try:
        info = envs.env_info(vector_env, "tfrl/MaskedPick-v0")
    finally:
        vector_env.close()
    check_observations(PPOConfig(), info)  # without memory the key is fine
    with pytest.raises(UsageError, match="takes its state as input 'state', which an observation field"):
        check_observations(PPOConfig(lstm_units=4), info)


# --- policies with memory -------------------------------------------------------------------------------------

def test_a_stateful_policy_carries_each_rows_state_and_forgets_ended_episodes():
    # A "policy" whose state counts its steps and whose action is the count so far.
    policy = StatefulPolicy(lambda obs, state: (state[:, 0] + 1, state + 1), state_size=1)
    obs = np.zeros((2, 3), np.float32)
    assert policy(obs).tolist() == [1, 1] and policy(obs).tolist() == [2, 2]
    policy.reset(np.array([True, False]))
    assert policy(obs).tolist() == [1, 3]
    with pytest.raises(UsageError, match="memory of 2 episodes and was given a batch of 3"):
        policy(np.zeros((3, 3), np.float32))
    policy.reset()
    assert policy(np.zeros((3, 3), np.float32)).tolist() == [1, 1, 1]


def test_evaluation_starts_each_episode_of_a_policy_with_memory_afresh():
    """A policy whose state counts the steps of its episode: evaluate must start it at 0 and reset a sub-env's
    count where its episode ends, so each row's counts run 0, 1, ..., length - 1, 0, 1, ..."""
    seen = []
    counter = StatefulPolicy(lambda obs, state: (seen.append(state[:, 0].copy()) or np.zeros(len(state), np.int64),
                                                 state + 1), state_size=1)
    counter(np.zeros((2, 4), np.float32))  # a memory left from before: evaluate must not continue it
    seen.clear()
    returns, lengths = evaluation.evaluate_episodes(counter, "CartPole-v1", num_episodes=4, seed=0, num_envs=2)
    counts = np.stack(seen)  # [steps, 2]
    runs = []
    for row in counts.T:
        restarts = np.flatnonzero(row == 0)
        assert restarts[0] == 0 and len(restarts) >= 2  # each row played 2 episodes
        runs += np.diff(restarts).tolist()  # the complete episodes' lengths
        for a, b in zip(restarts, [*restarts[1:], len(row)]):
            np.testing.assert_array_equal(row[a:b], np.arange(b - a))
    assert sorted(lengths.tolist()) == sorted(runs)[:4] or set(lengths.tolist()) <= set(runs)


@pytest.mark.parametrize("env_id, preset", [("tfrl/CartPoleNoVel-v1", "ppo-lstm-cartpolenovel"),
                                            ("tfrl/PendulumNoVel-v1", "ppo-lstm-pendulumnovel")])
def test_the_partially_observable_envs_pick_their_memory_presets(env_id, preset):
    from tfrl import presets

    found = presets.find("ppo", env_id)
    assert found.name == preset and found.hparams["lstm_units"] == 64
    config = config_lib.apply_overrides(PPOConfig(), found.hparams, preset)  # valid as written
    assert config.recurrent and config.rollout_length % config.sequence_steps == 0


# --- placement: XLA, and a mirrored strategy over two logical CPUs -----------------------------------------------

def test_the_sequence_update_with_xla_matches_without():
    case = _sequence_case()
    rollout = Rollout(case["obs"], case["actions"], case["advantages"], case["returns"], case["log_probs"], 0,
                      case["states"], case["starts"])
    config = PPOConfig(num_envs=N, rollout_length=T, batch_size=T * N, n_epochs=3, hidden_sizes=(3,), lstm_units=1)
    plain = PPOLearner(config, TWO_ACTIONS, _runtime(), seed=0)
    compiled = PPOLearner(config, TWO_ACTIONS, Runtime(options=RuntimeOptions(xla=True), device_name="/device:CPU:0"),
                          seed=0)
    compiled.network.set_weights(plain.network.get_weights())
    expected, got = plain.update(rollout), compiled.update(rollout)
    assert got.metrics["loss"] == pytest.approx(expected.metrics["loss"], rel=1e-4, abs=1e-6)
    for a, b in zip(got.weights, expected.weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


_MIRRORED_SCRIPT = """
import dataclasses, json, sys
import numpy as np
sys.path[:0] = ["tests", "tests/agents"]
from test_recurrent import TWO_ACTIONS, N, T, _sequence_case
from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.a2c.learning import A2CLearner
from tfrl.agents.actor_critic.rollout import Rollout
from tfrl.agents.ppo.config import PPOConfig
from tfrl.agents.ppo.learning import PPOLearner
from tfrl.hardware import runtime as runtime_lib
from tfrl.hardware.runtime import Runtime

mirrored = runtime_lib.apply(runtime_lib.RuntimeOptions(logical_cpus=2, strategy="mirrored",
                                                        cross_device_ops="reduce_to_one"))
single = Runtime(options=dataclasses.replace(mirrored.options, strategy="default", cross_device_ops="auto"),
                 device_name="/device:CPU:0")
case = _sequence_case()
rollout = Rollout(case["obs"], case["actions"], case["advantages"], case["returns"], case["log_probs"], 0,
                  case["states"], case["starts"])
out = {}
for name, make in (("ppo", lambda rt: PPOLearner(PPOConfig(num_envs=N, rollout_length=T, batch_size=T * N, n_epochs=2,
                                                           hidden_sizes=(3,), lstm_units=1), TWO_ACTIONS, rt, seed=0)),
                   ("a2c", lambda rt: A2CLearner(A2CConfig(num_envs=N, rollout_length=T, hidden_sizes=(3,),
                                                           lstm_units=1), TWO_ACTIONS, rt))):
    reference = make(single)
    replicated = make(mirrored)
    replicated.network.set_weights(reference.network.get_weights())
    a, b = reference.update(rollout), replicated.update(rollout)
    out[name] = {"copies": len(getattr(replicated.network.trainable_variables[0].value, "values", [None])),
                 "loss": [a.metrics["loss"], b.metrics["loss"]],
                 "difference": max(float(np.abs(x - y).max()) for x, y in zip(a.weights, b.weights))}
print(json.dumps(out))
"""


def test_a_mirrored_strategy_splits_whole_sequences_and_makes_the_single_device_update():
    out = run_json_script(_MIRRORED_SCRIPT)
    for name in ("ppo", "a2c"):  # 2 sequences per minibatch: one per replica
        assert out[name]["copies"] == 2
        assert out[name]["loss"][1] == pytest.approx(out[name]["loss"][0], rel=1e-5)
        assert out[name]["difference"] < 1e-5


def test_a_nan_advantage_stops_the_sequence_update_naming_the_loss():
    from tfrl.models import numerics

    case = _sequence_case()
    case["advantages"][5] = np.nan
    config = PPOConfig(num_envs=N, rollout_length=T, batch_size=T * N, n_epochs=1, hidden_sizes=(3,), lstm_units=1)
    learner = PPOLearner(config, TWO_ACTIONS, _runtime(), seed=0)
    with pytest.raises(numerics.NonFiniteError, match="loss"):
        learner.update(Rollout(case["obs"], case["actions"], case["advantages"], case["returns"], case["log_probs"],
                               0, case["states"], case["starts"]))


@pytest.mark.parametrize("hp, message", [
    ("lstm_units=1000000", "this run needs about .* of memory .*hidden_sizes \\(lstm_units\\)"),
    ("lstm_units=-2", "lstm_units must be >= 0")])
def test_absurd_or_negative_lstm_units_exit_2_with_one_line_and_write_nothing(tmp_path, hp, message):
    import pathlib
    import re
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "tfrl", "train", "--agent=ppo", "--env=tfrl/CartPoleNoVel-v1",
                             f"--hp={hp}", f"--run_dir={tmp_path / 'run'}"], capture_output=True, text=True,
                            cwd=pathlib.Path(__file__).resolve().parents[2], timeout=300)
    assert result.returncode == 2
    assert re.search(message, result.stderr.strip().splitlines()[-1])
    assert not (tmp_path / "run").exists()
