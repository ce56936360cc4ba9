"""DQN with memory (lstm_units, R2D2-style): the learner's pass along windows against the actor's steps, the loss
against NumPy, the settings refused, and one short run from the CLI that resumes, evaluates, exports (SavedModel,
LiteRT, ONNX), serves and loads without TensorFlow (module fixture)."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tfrl
from tfrl import config as config_lib
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import ReplayBatch
from tfrl.agents.dqn.recurrent import NumpyRecurrentQ, SequenceQ
from tfrl.agents.dqn.recurrent_learning import RecurrentDQNLearner
from tfrl.envs import EnvInfo
from tfrl.errors import UsageError
from tfrl.hardware import runtime as runtime_lib
from tfrl.hardware.runtime import RuntimeOptions
from tfrl.model_server.options import ServerOptions
from tfrl.models import serving
from tfrl.models.portable import convert
from tfrl.run import evaluation, runs

import tf_free
from serving_helpers import Client, running_server

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = "tfrl/CartPoleNoVel-v1"
UNITS = 8
STATE_SIZE = 2 * UNITS
TINY_ENV = EnvInfo(env_id="Tiny-v0", obs_shape=(2,), num_actions=2)


@pytest.fixture(scope="module")
def runtime():
    return runtime_lib.apply(RuntimeOptions())


def _learner(runtime, **overrides):
    config = DQNConfig(**{"hidden_sizes": (16,), "lstm_units": UNITS, "sequence_length": 3, "burn_in": 2,
                          "n_step_return": 2, "batch_size": 6, "gamma": 0.9, **overrides})
    return RecurrentDQNLearner(config, TINY_ENV, runtime)


def _windows(config, windows=2, seed=0):
    """C random windows in SequenceReplay.sample's layout, K = 1; an episode starts at row 3 of window 0, and
    row 1 of window 1 has no action (an episode's last row)."""
    rng = np.random.default_rng(seed)
    w, length = config.window_steps, config.sequence_length
    start = np.zeros((1, windows, w), np.float32)
    start[0, 0, 3] = 1.0
    valid = np.ones((1, windows, length), np.float32)
    valid[0, 1, 1] = 0.0
    return {"obs": rng.normal(size=(1, windows, w, 2)).astype(np.float32),
            "state": rng.normal(0, 0.5, size=(1, windows, STATE_SIZE)).astype(np.float32),
            "start": start, "action": rng.integers(0, 2, size=(1, windows, length)).astype(np.int32),
            "return": rng.normal(size=(1, windows, length)).astype(np.float32),
            "discount": rng.choice([0.0, 0.9, 0.81], size=(1, windows, length)).astype(np.float32),
            "bootstrap": (np.arange(length) + rng.integers(1, config.n_step_return + 1, size=(1, windows, length))
                          ).astype(np.int32), "valid": valid}


def _numpy_pass(model, window: dict, c: int, burn_in: int) -> np.ndarray:
    """The actor's computation along window c: step by step from its stored state, zeroed where an episode
    starts -> Q-values [W - burn_in, A] of the rows after the burn-in."""
    step = NumpyRecurrentQ(model)
    state, qs = window["state"][0, c:c + 1], []
    for t in range(window["obs"].shape[2]):
        state = state * (1.0 - window["start"][0, c, t])
        q, state = step(window["obs"][0, c, t:t + 1], state)
        qs.append(q[0])
    return np.array(qs[burn_in:])


@pytest.mark.parametrize("hidden_sizes", [(16,), ()])  # (): the LSTM reads the observations
def test_the_window_pass_is_the_actors_steps_from_the_stored_state(runtime, hidden_sizes):
    learner = _learner(runtime, hidden_sizes=hidden_sizes)
    window = _windows(learner.config)
    q = SequenceQ(learner.online, burn_in=2)(window["obs"][0], window["state"][0], window["start"][0]).numpy()
    assert q.shape == (2, 3 + 2, 2)
    for c in range(2):
        np.testing.assert_allclose(q[c], _numpy_pass(learner.online, window, c, 2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("double_dqn", [True, False])
def test_the_loss_is_the_mean_huber_error_of_the_rows_with_an_action(runtime, double_dqn):
    learner = _learner(runtime, double_dqn=double_dqn)
    rng = np.random.default_rng(3)
    learner.target.set_weights([w + rng.normal(0, 0.3, w.shape) for w in learner.online.get_weights()])
    window = _windows(learner.config, seed=1)
    errors, weights = [], []
    for c in range(2):
        online = _numpy_pass(learner.online, window, c, 2)
        target = _numpy_pass(learner.target, window, c, 2)
        for t in range(3):
            boot = window["bootstrap"][0, c, t]
            a_star = (online if double_dqn else target)[boot].argmax()
            y = window["return"][0, c, t] + window["discount"][0, c, t] * target[boot, a_star]
            error = abs(y - online[t, window["action"][0, c, t]])
            errors.append(0.5 * error ** 2 if error <= 1 else error - 0.5)
            weights.append(window["valid"][0, c, t])
    expected = np.dot(errors, weights) / np.sum(weights)  # 5 of the 6 rows count
    update = learner.update(ReplayBatch(window, update_target=False))
    assert update.metrics["loss"] == pytest.approx(expected, rel=1e-4)
    assert int(learner.gradient_steps.numpy()) == 1


@pytest.mark.parametrize("burn_in", [0, 2])
def test_the_burn_in_only_warms_the_state(runtime, burn_in):
    """The stored state reaches the trained rows' Q-values only through the burn-in, as a constant: no gradient
    flows back to it then; without a burn-in it does."""
    import tensorflow as tf

    learner = _learner(runtime)
    window = _windows(learner.config, seed=4)
    state = tf.constant(window["state"][0])
    with tf.GradientTape() as tape:
        tape.watch(state)
        q = SequenceQ(learner.online, burn_in=burn_in)(window["obs"][0], state, tf.zeros_like(window["start"][0]))
        total = tf.reduce_sum(q)
    gradient = tape.gradient(total, state)
    if burn_in:
        assert gradient is None or not np.any(gradient.numpy())
    else:
        assert np.abs(gradient.numpy()).max() > 1e-4


@pytest.mark.parametrize("overrides, message", [
    ({"lstm_units": 8}, "lstm_units needs sequence_length > 0"),
    ({"lstm_units": 8, "sequence_length": 16, "batch_size": 20},
     "batch_size=20 must be a multiple of sequence_length=16"),
    ({"lstm_units": 8, "sequence_length": 64, "burn_in": 32, "n_step_return": 5, "replay_capacity": 400,
      "num_envs": 4, "batch_size": 64}, r"a window of 101 steps \(burn_in \+ sequence_length \+ the targets' "
                                        r"steps\) is longer than what the replay keeps of each env "
                                        r"\(replay_capacity / num_envs = 100 steps\)"),
    ({"lstm_units": 8, "sequence_length": 16, "prioritized_replay": True}, "prioritized_replay with lstm_units"),
    ({"sequence_length": 16}, "sequence_length and burn_in apply to networks with memory only"),
    ({"lstm_units": -2}, "lstm_units must be >= 0"),
])
def test_settings_that_cannot_train_are_refused_in_one_line(overrides, message):
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.apply_overrides(DQNConfig(), overrides, "--hp")


# --- one run: CLI, resume, evaluate, export, serve, portable ---------------------------------------------------

HP = ["lstm_units=8", "hidden_sizes=[16]", "sequence_length=4", "burn_in=2", "n_step_return=2", "batch_size=16",
      "learning_starts=200", "total_env_steps=800", "eval_interval=400", "eval_episodes=2", "final_eval_episodes=2",
      "checkpoint_interval=400", "keep_best_policy=true", "num_envs=2", "replay_capacity=2000"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("recurrent_dqn")
    result = subprocess.run([sys.executable, "-m", "tfrl", "train", "--agent=dqn", f"--env={ENV}", "--preset=none",
                             *[f"--hp={hp}" for hp in HP], f"--run_dir={root / 'run'}", "--export_base_path="],
                            capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return {"root": root, "run_dir": root / "run"}


def test_the_checkpoint_holds_the_sequence_replay_and_the_run_resumes(trained):
    hp = {key: json.loads(value) if value[0] in "[0123456789tf" else value
          for key, value in (item.split("=") for item in HP)}
    run = tfrl.train("dqn", ENV, hp={**hp, "total_env_steps": 1200}, run_dir=trained["run_dir"], preset="none",
                     export=False, verbose=0)
    assert run.result["env_step"] == 1200
    records = [json.loads(line) for line in (trained["run_dir"] / "metrics.jsonl").read_text().splitlines()]
    finals = [r for r in records if r["kind"] == "final_eval"]
    assert [r["env_step"] for r in finals] == [800, 1200] and finals[1]["gradient_steps"] > finals[0]["gradient_steps"]
    assert {"kind": "resume", "env_step": 800} in records
    with np.load(trained["run_dir"] / "checkpoints" / "ckpt-2.npz") as arrays:  # the one at env step 800
        assert arrays["state"].shape == (2, 1000, STATE_SIZE) and arrays["start"].shape == (2, 1000)


def test_the_export_carries_the_state_as_the_actor_does(trained, tmp_path):
    version = runs.export_run(trained["run_dir"], tmp_path, "novel")
    served = serving.load(version)
    assert served.state_size == STATE_SIZE
    loaded = runs.load_policy(trained["run_dir"])
    mirror = NumpyRecurrentQ(loaded.policy.model)
    obs = np.random.default_rng(0).normal(0, 0.05, size=(8, 3, 2)).astype(np.float32)
    state = mirror_state = np.zeros((3, STATE_SIZE), np.float32)
    for o in obs:
        out = served.outputs(o, state)
        q, mirror_state = mirror(o, mirror_state)
        np.testing.assert_allclose(out["state"], mirror_state, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out["q_values"], q, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(out["action"], q.argmax(-1))
        state = out["state"]
    assert np.abs(state).max() > 1e-3
    policy = tfrl.load_policy(version)
    with pytest.raises(UsageError, match=f"takes a state of shape \\[3, {STATE_SIZE}\\] for 3 observations"):
        policy.step(obs[0], np.zeros((3, 5), np.float32))

    options = ServerOptions(model_name="novel", model_base_path=version.parent, file_system_poll_wait_seconds=0)
    with running_server(options) as (port, _):
        status, body = Client(port).request("POST", "/v1/models/novel:predict",
                                            {"instances": [{"observation": [0.01, 0.02], "state": [0.0] * STATE_SIZE}]})
        expected = served.outputs(np.array([[0.01, 0.02]], np.float32), np.zeros((1, STATE_SIZE), np.float32))
        assert status == 200 and body["predictions"][0]["action"] == int(expected["action"][0])
        np.testing.assert_allclose(body["predictions"][0]["state"], expected["state"][0], rtol=1e-5, atol=1e-6)


def test_litert_and_onnx_carry_the_state_and_play_without_tensorflow(trained, tmp_path):
    def finisher(env):
        return convert.finisher(("litert", "onnx"), "none", env, num_observations=128)

    version = runs.export_run(trained["run_dir"], tmp_path, "novel", finisher=finisher)
    metadata = json.loads((version / "assets.extra" / "tfrl_metadata.json").read_text())
    for fmt in ("litert", "onnx"):
        assert metadata["portable"][fmt]["parity"]["passed"], metadata["portable"][fmt]
        assert metadata["portable"][fmt]["memory"]["state_size"] == STATE_SIZE
    reference = tfrl.load_policy(version)
    np.testing.assert_array_equal(evaluation.evaluate(tfrl.load_policy(version / "policy.tflite"), ENV, 4, seed=3,
                                                      num_envs=2),
                                  evaluation.evaluate(reference, ENV, 4, seed=3, num_envs=2))
    observations = np.random.default_rng(2).normal(0, 0.05, size=(10, 3, 2)).astype(np.float32)
    np.save(tmp_path / "observations.npy", observations)
    result = tf_free.run_json(tf_free.PLAY_FILES, version, tmp_path / "observations.npy")
    assert not {"tensorflow", "keras", "gymnasium"} & set(result["loaded"]), result["loaded"]
    reference.reset()  # it kept the memory of the 2 evaluated episodes
    want = [reference(obs).tolist() for obs in observations]
    reference.reset([True, False, False])  # row 0 starts again; rows 1 and 2 go on
    want.append(reference(observations[0]).tolist())
    assert result["policy.tflite"] == want and result["policy.onnx"] == want


def test_evaluate_runs_the_recurrent_q_policy(trained):
    result = subprocess.run([sys.executable, "-m", "tfrl", "evaluate", f"--run_dir={trained['run_dir']}",
                             "--episodes=3"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "3 episodes of tfrl/CartPoleNoVel-v1" in result.stdout + result.stderr


def test_actors_and_the_agents_without_memory_refuse_it_in_one_line(trained, tmp_path):
    result = subprocess.run([sys.executable, "-m", "tfrl", "train", "--agent=dqn", f"--env={ENV}", "--preset=none",
                             *[f"--hp={hp}" for hp in HP], "--actors=1", f"--run_dir={tmp_path / 'a'}"],
                            capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert result.returncode != 0 and "--actors with lstm_units" in result.stderr
    assert not (tmp_path / "a").exists()
    from tfrl import agents
    for agent, reason in (("td3", "this agent learns from single transitions"),
                          ("qrdqn", "QR-DQN's quantile head has no sequence learner: use --agent=dqn"),
                          ("tqc", "TQC's quantile critics have no sequence learner: use --agent=sac"),
                          ("crossq", "CrossQ's batch renormalization .* use --agent=sac")):
        with pytest.raises(config_lib.ConfigError, match=f"lstm_units: .*{reason}"):
            config_lib.apply_overrides(agents.get(agent).config_cls(), {"lstm_units": 64, "sequence_length": 8},
                                       "--hp")


def test_windows_that_do_not_split_over_the_replicas_or_reach_every_worker_are_refused():
    from types import SimpleNamespace

    from tfrl.agents.off_policy.training import check_windows
    from tfrl.hardware.distribute import DistributeConfigError

    config = DQNConfig(lstm_units=8, sequence_length=16, batch_size=64, learning_starts=100)  # 4 windows, W = 17
    single = SimpleNamespace(cluster=SimpleNamespace(num_workers=1))
    check_windows("DQN", config, SimpleNamespace(strategy=object(), local_replicas=4, **vars(single)))
    with pytest.raises(DistributeConfigError, match=r"batch_size / sequence_length \(windows per gradient step\) = 4 "
                                                    "does not split evenly over this worker's 8 replicas"):
        check_windows("DQN", config, SimpleNamespace(strategy=object(), local_replicas=8, **vars(single)))
    # Two workers: after 100 vector steps of one env a ring holds 100 - 16 = 84 windows >= 4; after 18, only 2.
    workers = SimpleNamespace(strategy=None, cluster=SimpleNamespace(num_workers=2))
    check_windows("DQN", config, workers)
    with pytest.raises(DistributeConfigError, match="fewer than batch_size=64 trained steps.* learning_starts to at "
                                                    "least 20"):
        check_windows("DQN", DQNConfig(lstm_units=8, sequence_length=16, batch_size=64, learning_starts=18), workers)
