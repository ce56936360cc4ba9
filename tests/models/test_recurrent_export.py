"""A policy with memory outside training: the stateful export, tfrl-serve with the state carried by the client,
tfrl.load_policy's kept and explicit state, evaluate, resume, the LiteRT and ONNX files carrying the state, and
what is refused. One short PPO run and one A2C run train once in this process (module fixture)."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tfrl
from tfrl.agents.actor_critic import recurrent
from tfrl.errors import UsageError
from tfrl.model_server.options import ServerOptions
from tfrl import envs
from tfrl.models import export, serving
from tfrl.models.portable import convert, parity, runtime
from tfrl.run import evaluation, runs

import tf_free
from serving_helpers import Client, running_server

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = "tfrl/CartPoleNoVel-v1"
HP = dict(lstm_units=8, hidden_sizes=(16,), num_envs=4, rollout_length=16, total_env_steps=1024,
          eval_interval=0, final_eval_episodes=2, checkpoint_interval=512, log_interval=512)
STATE_SIZE = 2 * 2 * 8  # (h, c) of the policy's LSTM and of the value's


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("recurrent")
    ppo = tfrl.train("ppo", ENV, hp={**HP, "batch_size": 32, "n_epochs": 2, "normalize_observations": True,
                                     "keep_best_policy": True, "eval_interval": 512, "eval_episodes": 2},
                     run_dir=root / "ppo", preset="none", export=False, verbose=0)
    a2c = tfrl.train("a2c", ENV, hp=HP, run_dir=root / "a2c", preset="none", export=False, verbose=0)
    exported = ppo.export(root / "saved_models", model_name="novel")
    return {"root": root, "ppo": ppo, "a2c": a2c, "export": exported}


def _observations(steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.05, size=(steps, 3, 2)).astype(np.float32)


def test_the_export_takes_and_returns_the_state_and_says_its_size(trained):
    metadata = json.loads((trained["export"] / "assets.extra" / "tfrl_metadata.json").read_text())
    assert metadata["memory"] == {"state_size": STATE_SIZE, "input": "state", "output": "state", "start": "zeros"}
    assert metadata["signature"]["inputs"]["state"] == f"float32 [None, {STATE_SIZE}]"
    assert metadata["signature"]["outputs"]["state"] == f"float32 [None, {STATE_SIZE}]"
    served = serving.load(trained["export"])
    assert served.state_size == STATE_SIZE and served.observations.row_shape == (2,)


def test_carrying_the_state_through_the_savedmodel_acts_as_the_training_mirror(trained):
    """The exported step (normalization inside) and the agent's NumPy mirror give the same actions and states
    along an episode."""
    served = serving.load(trained["export"])
    loaded = runs.load_policy(trained["ppo"].run_dir)
    mirror = recurrent.NumpyRecurrentActorCritic(loaded.policy.model)
    normalize = loaded.policy.observation_normalization
    state = np.zeros((3, STATE_SIZE), np.float32)
    mirror_state = state.copy()
    for obs in _observations(12):
        out = served.outputs(obs, state)
        logits, _, mirror_state = mirror(normalize(obs).numpy(), mirror_state)
        np.testing.assert_allclose(out["state"], mirror_state, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(out["action"], logits.argmax(-1))
        state = out["state"]
    assert np.abs(state).max() > 1e-3  # the state moved: the test compares something


def test_load_policy_keeps_one_state_per_row_or_takes_it_explicitly(trained):
    for source in (trained["export"], trained["ppo"].run_dir):
        policy = tfrl.load_policy(source)
        assert policy.state_size == STATE_SIZE
        observations = _observations(6, seed=1)
        state, explicit = np.zeros((3, STATE_SIZE), np.float32), []
        for obs in observations:
            actions, state = policy.step(obs, state)
            explicit.append(actions)
        kept = [policy(obs) for obs in observations]
        np.testing.assert_array_equal(np.stack(kept), np.stack(explicit))
        # After reset() the kept memory starts again: the same actions again.
        policy.reset()
        np.testing.assert_array_equal(np.stack([policy(obs) for obs in observations]), np.stack(explicit))
        with pytest.raises(UsageError, match="memory of 3 episodes and was given a batch of 1"):
            policy(observations[0][0])
        with pytest.raises(UsageError, match=f"takes a state of shape \\[3, {STATE_SIZE}\\] for 3 observations"):
            policy.step(observations[0], np.zeros((3, 5), np.float32))
        with pytest.raises(UsageError, match="for 3 observations, got \\[" + str(STATE_SIZE) + "\\]"):
            policy.step(observations[0], np.zeros(STATE_SIZE, np.float32))  # one state for three episodes
        with pytest.raises(UsageError, match="the state holds NaN or Inf"):
            policy.step(observations[0], np.full((3, STATE_SIZE), np.nan, np.float32))
        with pytest.raises(UsageError, match="takes a state of numbers \\(float32\\), got list"):
            policy.step(observations[0], [["zero"] * STATE_SIZE] * 3)  # it raised numpy's bare ValueError
        action, state = policy.step(observations[0][0], np.zeros(STATE_SIZE, np.float32))  # one observation
        assert np.ndim(action) == 0 and state.shape == (STATE_SIZE,)


def test_tfrl_serve_serves_the_state_and_refuses_a_state_of_the_wrong_size(trained):
    options = ServerOptions(model_name="novel", model_base_path=trained["export"].parent,
                            file_system_poll_wait_seconds=0)
    served = serving.load(trained["export"])
    with running_server(options) as (port, _):
        client = Client(port)
        status, metadata = client.request("GET", "/v1/models/novel/metadata")
        signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
        assert status == 200 and {"observation", "state"} <= set(signature["inputs"]) and "state" in signature["outputs"]
        state = [[0.0] * STATE_SIZE]
        for obs in _observations(5)[:, 0]:
            status, body = client.request("POST", "/v1/models/novel:predict",
                                          {"instances": [{"observation": obs.tolist(), "state": state[0]}]})
            assert status == 200, body
            expected = served.outputs(obs[None], np.asarray(state, np.float32))
            assert body["predictions"][0]["action"] == int(expected["action"][0])
            np.testing.assert_allclose(body["predictions"][0]["state"], expected["state"][0], rtol=1e-5, atol=1e-6)
            state = [body["predictions"][0]["state"]]
        status, body = client.request("POST", "/v1/models/novel:predict",
                                      {"inputs": {"observation": [[0.0, 0.0]], "state": [[0.0] * 10]}})
        assert status == 400 and f"input 'state' has shape [1, 10] but the signature takes [-1, {STATE_SIZE}]" in \
            body["error"]


def test_the_best_policy_is_kept_and_exported_with_its_memory(trained):
    loaded = runs.load_policy(trained["ppo"].run_dir)
    assert loaded.best and loaded.policy.state_size == STATE_SIZE
    metadata = json.loads((trained["export"] / "assets.extra" / "tfrl_metadata.json").read_text())
    assert metadata["checkpoint"] is None and metadata["best_policy"]["eval_return_mean"] is not None


def test_evaluate_runs_the_recurrent_policies_of_runs_and_exports_and_records_a_video(trained, tmp_path):
    video = tmp_path / "novel.gif"
    for args in ([f"--run_dir={trained['a2c'].run_dir}", f"--video={video}"], [f"--saved_model={trained['export']}"]):
        result = subprocess.run([sys.executable, "-m", "tfrl", "evaluate", *args, "--episodes=3"],
                                capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
        assert result.returncode == 0, result.stderr
        assert "3 episodes of tfrl/CartPoleNoVel-v1" in result.stdout + result.stderr
    assert video.stat().st_size > 1000


def test_a_recurrent_run_continues_with_a_longer_budget(trained):
    run = tfrl.train("a2c", ENV, hp={**HP, "total_env_steps": 1536}, run_dir=trained["a2c"].run_dir,
                     preset="none", export=False, verbose=0)
    assert run.result["env_step"] == 1536
    records = [json.loads(line) for line in (trained["a2c"].run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("kind") == "final_eval" and r["env_step"] == 1536 for r in records)


def _portable_export(run_dir, base, num_observations=300):
    def finisher(env):
        return convert.finisher(("litert", "onnx"), "none", env, num_observations=num_observations)

    return runs.export_run(run_dir, base, "novel", finisher=finisher)


def test_litert_and_onnx_carry_the_memory_along_whole_episodes(trained, tmp_path):
    """Both files take and return the state; their parity was checked along episodes, each side carrying its own
    state; loaded, they keep a state per row and play whole episodes as the SavedModel does."""
    version = _portable_export(trained["ppo"].run_dir, tmp_path)  # normalization inside, the best policy
    portable = export.read_metadata(version)["portable"]
    reference = serving.load(version)
    for fmt, output in (("litert", "state"), ("onnx", "next_state")):
        assert portable[fmt]["parity"]["passed"] and portable[fmt]["parity"]["observations"] == 300, portable[fmt]
        assert portable[fmt]["parity"]["max_error"]["state"] <= 1e-4
        assert portable[fmt]["memory"] == {"state_size": STATE_SIZE, "input": "state", "output": output,
                                           "start": "zeros"}
    recording = parity.recorded_episodes(reference, envs.as_spec(ENV), 240, seed=5)
    assert sum(starts.sum() for starts in recording.starts[1:]) > 0  # episodes ended inside: states were zeroed
    want = parity.outputs_along(reference, recording)
    for file in ("policy.tflite", "policy.onnx"):
        policy = tfrl.load_policy(version / file)
        assert policy.state_size == STATE_SIZE and [f.key for f in policy.fields] == ["observation"]
        got = parity.outputs_along(policy, recording)
        np.testing.assert_array_equal(got["action"], want["action"])
        np.testing.assert_allclose(got["state"], want["state"], rtol=1e-4, atol=1e-5)
        # Whole episodes with the kept state, reset where each row's episode ends: the SavedModel's returns.
        np.testing.assert_array_equal(evaluation.evaluate(policy, ENV, 6, seed=11, num_envs=3),
                                      evaluation.evaluate(tfrl.load_policy(version), ENV, 6, seed=11, num_envs=3))
        action, state = policy.step(np.zeros(2, np.float32), np.zeros(STATE_SIZE, np.float32))
        assert np.ndim(action) == 0 and state.shape == (STATE_SIZE,)
        with pytest.raises(UsageError, match=f"takes a state of shape \\[3, {STATE_SIZE}\\] for 3 observations"):
            policy.step(np.zeros((3, 2), np.float32), np.zeros((3, 5), np.float32))
        with pytest.raises(UsageError, match="the state holds NaN or Inf"):
            policy.outputs(np.zeros((1, 2), np.float32), np.full((1, STATE_SIZE), np.inf, np.float32))
        policy(np.zeros((3, 2), np.float32))
        with pytest.raises(UsageError, match="memory of 3 episodes and was given a batch of 1"):
            policy(np.zeros(2, np.float32))


def test_a_file_that_forgets_its_state_fails_the_parity_check_and_nothing_is_written(trained, tmp_path, monkeypatch):
    """Each step alone may agree; carried along episodes, a file fed zeros for its state differs."""
    forget = runtime.PortablePolicy._answer
    monkeypatch.setattr(runtime.PortablePolicy, "_answer",
                        lambda self, batch, state: forget(self, batch, None if state is None else 0 * state))
    with pytest.raises(UsageError, match=r"--format=litert: the converted policy differs from the SavedModel "
                                         r"\(.*state off by .*nothing was written"):
        _portable_export(trained["a2c"].run_dir, tmp_path, num_observations=64)
    assert export.version_numbers(tmp_path / "novel") == []


def test_the_files_of_a_policy_with_memory_answer_without_tensorflow(trained, tmp_path):
    version = _portable_export(trained["a2c"].run_dir, tmp_path, num_observations=64)
    observations = _observations(10, seed=2)
    np.save(tmp_path / "observations.npy", observations)
    result = tf_free.run_json(tf_free.PLAY_FILES, version, tmp_path / "observations.npy")
    assert not {"tensorflow", "keras", "gymnasium", "absl"} & set(result["loaded"]), result["loaded"]
    reference = tfrl.load_policy(version)
    want = [reference(obs).tolist() for obs in observations]
    reference.reset([True, False, False])  # row 0 starts again; rows 1 and 2 go on
    want.append(reference(observations[0]).tolist())
    assert result["policy.tflite"] == want and result["policy.onnx"] == want
