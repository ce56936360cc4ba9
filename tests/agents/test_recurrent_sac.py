"""SAC with memory (lstm_units): the learner's passes along windows against the networks stepped one row at a time,
its losses against a reference computed that way, and one short run that resumes from the CLI, evaluates,
exports (SavedModel, LiteRT, ONNX), serves and loads without TensorFlow (module fixture)."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tfrl
from tfrl.agents.sac.config import SACConfig
from tfrl.agents.sac.learning import squashed_gaussian
from tfrl.agents.sac.recurrent import ActorAlong, CriticAlong, NumpyRecurrentSAC
from tfrl.agents.sac.recurrent_learning import RecurrentSACLearner
from tfrl.envs import EnvInfo
from tfrl.hardware import runtime as runtime_lib
from tfrl.hardware.runtime import RuntimeOptions
from tfrl.model_server.options import ServerOptions
from tfrl.models import serving
from tfrl.models.portable import convert
from tfrl.run import evaluation, runs

import tf_free
from serving_helpers import Client, running_server

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = "tfrl/PendulumNoVel-v1"
UNITS = 4
ENV_INFO = EnvInfo("Tiny-v0", (2,), 0, action_shape=(1,), action_low=(-2.0,), action_high=(2.0,))


@pytest.fixture(scope="module")
def runtime():
    return runtime_lib.apply(RuntimeOptions())


def _learner(runtime):
    config = SACConfig(hidden_sizes=(8,), lstm_units=UNITS, sequence_length=3, burn_in=2, batch_size=6, gamma=0.9,
                       learn_temperature=False, initial_temperature=0.2)
    return RecurrentSACLearner(config, ENV_INFO, runtime)


def _windows(seed=0):
    """C = 2 windows of W = 6 rows (burn-in 2, 3 trained, 1 bootstrap), K = 1; an episode starts at row 3 of
    window 0; row 1 of window 1 has no action. The bootstrap row of trained row t is t + 1."""
    rng = np.random.default_rng(seed)
    start = np.zeros((1, 2, 6), np.float32)
    start[0, 0, 3] = 1.0
    valid = np.ones((1, 2, 3), np.float32)
    valid[0, 1, 1] = 0.0
    return {"obs": rng.normal(size=(1, 2, 6, 2)).astype(np.float32),
            "state": rng.normal(0, 0.5, size=(1, 2, 6 * UNITS)).astype(np.float32), "start": start,
            "action": rng.uniform(-1, 1, size=(1, 2, 3, 1)).astype(np.float32),
            "return": rng.normal(size=(1, 2, 3)).astype(np.float32),
            "discount": np.array([[[0.9, 0.0, 0.9], [0.9, 0.9, 0.9]]], np.float32),
            "bootstrap": np.tile(np.arange(1, 4, dtype=np.int32), (1, 2, 1)), "valid": valid,
            "noise_next": rng.normal(size=(1, 2, 3, 1)).astype(np.float32),
            "noise": rng.normal(size=(1, 2, 3, 1)).astype(np.float32)}


def _stepped(model, window, c, state, action=None):
    """The Keras step network called one row at a time along window c from `state`, zeroed where an episode
    starts -> its first outputs of the rows after the burn-in (2) and the states before each of those rows."""
    outputs, states = [], []
    for t in range(6):
        state = state * (1.0 - window["start"][0, c, t])
        inputs = [window["obs"][0, c, t:t + 1]] + ([] if action is None else [action[t:t + 1]]) + [state]
        out, next_state = model(inputs)
        outputs.append(np.asarray(out)[0])
        states.append(state)
        state = np.asarray(next_state)
    return np.array(outputs[2:]), states[2:]


def test_the_window_passes_are_the_networks_stepped_row_by_row(runtime):
    learner = _learner(runtime)
    window = _windows()
    states = np.split(window["state"][0], 3, axis=-1)
    mean, log_std = ActorAlong(learner.actor, 2)(window["obs"][0], states[0], window["start"][0])
    along = CriticAlong(learner.critics[0], 2)
    h = along.states(window["obs"][0], states[1], window["start"][0])
    actions = np.random.default_rng(1).uniform(-1, 1, size=(6, 1)).astype(np.float32)
    for c in range(2):
        params, _ = _stepped(learner.actor, window, c, states[0][c:c + 1])
        np.testing.assert_allclose(np.concatenate([mean[c], log_std[c]], -1), params, rtol=1e-5, atol=1e-6)
        q, _ = _stepped(learner.critics[0], window, c, states[1][c:c + 1], actions)
        np.testing.assert_allclose(along.q(h[c], actions[2:]), q, rtol=1e-5, atol=1e-6)


def test_the_acting_mirror_steps_the_actor_and_both_critics(runtime):
    learner = _learner(runtime)
    mirror = NumpyRecurrentSAC(learner.actor, learner.critics)
    obs = np.random.default_rng(2).normal(size=(3, 2)).astype(np.float32)
    state = np.random.default_rng(3).normal(0, 0.5, size=(3, 6 * UNITS)).astype(np.float32)
    (mean, log_std), next_state = mirror(obs, state)
    parts = np.split(state, 3, axis=-1)
    params, actor_state = learner.actor([obs, parts[0]])
    np.testing.assert_allclose(np.concatenate([mean, log_std], -1), params, rtol=1e-5, atol=1e-6)
    expected = [actor_state] + [critic([obs, np.zeros((3, 1), np.float32), part])[1]
                                for critic, part in zip(learner.critics, parts[1:])]
    np.testing.assert_allclose(next_state, np.concatenate(expected, -1), rtol=1e-5, atol=1e-6)


def test_the_losses_are_sacs_over_the_rows_with_an_action(runtime):
    """critic_loss, actor_loss and q_mean of one update against the networks stepped row by row (alpha 0.2 fixed):
    y = r + discount (min_i Q'_i(h'_t+1, a') - alpha log pi(a'|h_t+1)), five of the six rows counted."""
    learner = _learner(runtime)
    rng = np.random.default_rng(4)
    for target in learner.target_critics:
        target.set_weights([w + rng.normal(0, 0.3, w.shape) for w in target.get_weights()])
    w = _windows(seed=5)
    states = np.split(w["state"][0], 3, axis=-1)
    valid = w["valid"][0].reshape(-1)
    critic_errors, actor_terms, q_values = [], [], []
    for c in range(2):
        params, _ = _stepped(learner.actor, w, c, states[0][c:c + 1])  # rows 2..5
        mean, log_std = np.split(params, 2, axis=-1)
        a_next, logp_next = (np.asarray(x) for x in squashed_gaussian(mean[1:], log_std[1:], w["noise_next"][0, c]))
        a_pi, logp = (np.asarray(x) for x in squashed_gaussian(mean[:3], log_std[:3], w["noise"][0, c]))
        replay_action = np.concatenate([np.zeros((2, 1)), w["action"][0, c], np.zeros((1, 1))]).astype(np.float32)
        next_action = np.concatenate([np.zeros((3, 1)), a_next]).astype(np.float32)  # at rows 3..5
        pi_action = np.concatenate([np.zeros((2, 1)), a_pi, np.zeros((1, 1))]).astype(np.float32)
        q_next = np.minimum(*[_stepped(t, w, c, s[c:c + 1], next_action)[0][1:]
                              for t, s in zip(learner.target_critics, states[1:])])
        y = w["return"][0, c] + w["discount"][0, c] * (q_next - 0.2 * logp_next)
        q = [_stepped(critic, w, c, s[c:c + 1], replay_action)[0][:3] for critic, s in zip(learner.critics, states[1:])]
        critic_errors.append(0.5 * ((q[0] - y) ** 2 + (q[1] - y) ** 2))
        q_values.append(0.5 * (q[0] + q[1]))
        q_pi = np.minimum(*[_stepped(critic, w, c, s[c:c + 1], pi_action)[0][:3]
                            for critic, s in zip(learner.critics, states[1:])])
        actor_terms.append((0.2 * logp - q_pi, logp))
    # The actor's loss is taken after the critics' step: here the critics' weights before it, so the learner's
    # critics are frozen (learning rate 0) for the comparison.
    learner.critic_optimizer.learning_rate.assign(0.0)
    update = learner.update(w)
    mean_of = lambda values: np.dot(np.concatenate(values), valid) / valid.sum()  # noqa: E731
    assert update.metrics["critic_loss"] == pytest.approx(mean_of(critic_errors), rel=1e-4)
    assert update.metrics["q_mean"] == pytest.approx(mean_of(q_values), rel=1e-4)
    assert update.metrics["actor_loss"] == pytest.approx(mean_of([a for a, _ in actor_terms]), rel=1e-4)
    assert update.metrics["entropy"] == pytest.approx(-mean_of([b for _, b in actor_terms]), rel=1e-4)


# --- one run: tfrl.train, the CLI resume, evaluate, export, serve, portable ---------------------------------------

HP = {"lstm_units": 8, "hidden_sizes": (16,), "sequence_length": 4, "burn_in": 2, "batch_size": 16,
      "learning_starts": 200, "total_env_steps": 600, "eval_interval": 300, "eval_episodes": 1,
      "final_eval_episodes": 1, "checkpoint_interval": 300, "keep_best_policy": True, "num_envs": 2,
      "replay_capacity": 2000, "normalize_observations": True}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("recurrent_sac")
    run = tfrl.train("sac", ENV, hp=HP, run_dir=root / "run", preset="none", export=False, verbose=0)
    return {"root": root, "run": run, "run_dir": root / "run"}


def test_the_cli_resumes_the_run_with_its_sequence_replay(trained):
    with np.load(trained["run_dir"] / "checkpoints" / "ckpt-2.npz") as arrays:
        assert arrays["state"].shape == (2, 1000, 6 * 8) and arrays["action"].shape == (2, 1000, 1)
    hp = [f"--hp={key}={json.dumps(list(value) if isinstance(value, tuple) else value)}" for key, value in HP.items()
          if key != "total_env_steps"]
    result = subprocess.run([sys.executable, "-m", "tfrl", "train", "--agent=sac", f"--env={ENV}", "--preset=none",
                             *hp, "--hp=total_env_steps=900", f"--run_dir={trained['run_dir']}",
                             "--export_base_path="], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (trained["run_dir"] / "metrics.jsonl").read_text().splitlines()]
    assert {"kind": "resume", "env_step": 600} in records
    finals = [r for r in records if r["kind"] == "final_eval"]
    assert [r["env_step"] for r in finals] == [600, 900] and finals[1]["gradient_steps"] > finals[0]["gradient_steps"]


def test_the_export_carries_the_actors_state_everywhere(trained, tmp_path):
    def finisher(env):
        return convert.finisher(("litert", "onnx"), "none", env, num_observations=128)

    version = runs.export_run(trained["run_dir"], tmp_path, "novel", finisher=finisher)
    metadata = json.loads((version / "assets.extra" / "tfrl_metadata.json").read_text())
    assert metadata["memory"]["state_size"] == 2 * 8
    for fmt in ("litert", "onnx"):
        assert metadata["portable"][fmt]["parity"]["passed"], metadata["portable"][fmt]
    reference = tfrl.load_policy(version)
    run_policy = tfrl.load_policy(trained["run_dir"])
    assert evaluation.evaluate(reference, ENV, 2, seed=3) == pytest.approx(evaluation.evaluate(run_policy, ENV, 2,
                                                                                                seed=3))
    observations = np.random.default_rng(2).normal(0, 0.5, size=(6, 3, 2)).astype(np.float32)
    np.save(tmp_path / "observations.npy", observations)
    result = tf_free.run_json(tf_free.PLAY_FILES, version, tmp_path / "observations.npy")
    assert not {"tensorflow", "keras", "gymnasium"} & set(result["loaded"]), result["loaded"]
    reference.reset()
    want = [reference(obs) for obs in observations]
    reference.reset([True, False, False])  # row 0 starts again; rows 1 and 2 go on
    want.append(reference(observations[0]))
    for file in ("policy.tflite", "policy.onnx"):
        np.testing.assert_allclose(result[file], want, rtol=1e-4, atol=1e-4)

    served = serving.load(version)
    options = ServerOptions(model_name="novel", model_base_path=version.parent, file_system_poll_wait_seconds=0)
    with running_server(options) as (port, _):
        status, body = Client(port).request("POST", "/v1/models/novel:predict",
                                            {"instances": [{"observation": [0.1, 0.2], "state": [0.0] * 16}]})
        expected = served.outputs(np.array([[0.1, 0.2]], np.float32), np.zeros((1, 16), np.float32))
        assert status == 200, body
        np.testing.assert_allclose(body["predictions"][0]["action"], expected["action"][0], rtol=1e-5)
        np.testing.assert_allclose(body["predictions"][0]["state"], expected["state"][0], rtol=1e-5, atol=1e-6)
