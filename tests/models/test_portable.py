"""LiteRT and ONNX exports (tfrl.models.portable): every agent and space the SavedModel serves, converted, checked against
the SavedModel, and run without TensorFlow.

Short runs of each kind train once in this process (module fixture); the exports and checks run on them.
"""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tf_free
import tfrl
from tfrl import envs
from tfrl.errors import UsageError
from tfrl.models import export, serving
from tfrl.models.portable import convert, formats, parity
from tfrl.run import runs

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
_OFF = {"eval_interval": 0, "final_eval_episodes": 1, "checkpoint_interval": 0}
# name: (agent, env, hp). Each is a kind of policy the SavedModel serves.
KINDS = {
    "dqn": ("dqn", "CartPole-v1", {"total_env_steps": 600, "learning_starts": 200, "hidden_sizes": [16]}),
    "ppo_discrete": ("ppo", "CartPole-v1", {"total_env_steps": 256, "num_envs": 2, "rollout_length": 64,
                                            "batch_size": 64, "n_epochs": 1, "hidden_sizes": [16]}),
    "ppo_continuous": ("ppo", "Pendulum-v1", {"total_env_steps": 256, "num_envs": 2, "rollout_length": 64,
                                              "batch_size": 64, "n_epochs": 1, "hidden_sizes": [16],
                                              "normalize_observations": True}),
    "sac": ("sac", "Pendulum-v1", {"total_env_steps": 400, "learning_starts": 200, "batch_size": 32,
                                   "hidden_sizes": [16]}),
    "dqn_cnn": ("dqn", "tfrl/Catch-v0", {"total_env_steps": 400, "learning_starts": 200, "torso": "minatar_cnn",
                                         "hidden_sizes": [16], "num_envs": 1}),
    "ppo_dict_mask": ("ppo", "tfrl/MaskedPick-v0", {"total_env_steps": 256, "num_envs": 2, "rollout_length": 64,
                                                    "batch_size": 64, "n_epochs": 1, "hidden_sizes": [16]}),
    "a2c_multidiscrete": ("a2c", "tfrl/MultiKnob-v0", {"total_env_steps": 256, "num_envs": 2,
                                                       "rollout_length": 8, "hidden_sizes": [16]}),
    "a2c_multibinary": ("a2c", "tfrl/Switches-v0", {"total_env_steps": 256, "num_envs": 2, "rollout_length": 8,
                                                    "hidden_sizes": [16]}),
    "dqn_dict_discrete_keys": ("dqn", "tfrl/GoalGrid-v0", {"total_env_steps": 600, "learning_starts": 200,
                                                           "hidden_sizes": [16]}),
    "sac_dict": ("sac", "tfrl/GoalPoint-v0", {"total_env_steps": 400, "learning_starts": 200, "batch_size": 32,
                                              "hidden_sizes": [16]}),
    "qrdqn": ("qrdqn", "CartPole-v1", {"total_env_steps": 600, "learning_starts": 200, "hidden_sizes": [16],
                                       "num_quantiles": 8}),
    "tqc": ("tqc", "Pendulum-v1", {"total_env_steps": 400, "learning_starts": 200, "batch_size": 32,
                                   "hidden_sizes": [16], "num_quantiles": 5}),
    "crossq": ("crossq", "Pendulum-v1", {"total_env_steps": 400, "learning_starts": 200, "batch_size": 32,
                                         "hidden_sizes": [16], "critic_hidden_sizes": [16],
                                         "renorm_warmup_steps": 50}),
}
# Weights big enough to be quantized (LiteRT leaves tensors under 1024 elements in float32).
WIDE = ("dqn", "CartPole-v1", {"total_env_steps": 600, "learning_starts": 200, "hidden_sizes": [256, 256]})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{kind: run directory} of short runs, no export."""
    root = tmp_path_factory.mktemp("portable")
    run_dirs = {}
    for name, (agent, env, hp) in {**KINDS, "dqn_wide": WIDE}.items():
        tfrl.train(agent, env, hp={**hp, **_OFF}, run_dir=root / name, preset="none", export=False, verbose=0)
        run_dirs[name] = root / name
    return run_dirs


def _env(run_dir):
    record = runs.read_config(run_dir)
    return envs.as_spec(record.env_id, record.env_kwargs)


def _export(run_dir, base, formats=("litert", "onnx"), quantize="none", **options):
    def finisher(env):
        return convert.finisher(formats, quantize, env, num_observations=300, **options)

    return runs.export_run(run_dir, base, "m", finisher=finisher)


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_policy_converts_and_answers_as_its_saved_model(trained, tmp_path, kind):
    version = _export(trained[kind], tmp_path)
    metadata = export.read_metadata(version)
    reference = serving.load(version)
    batch = parity.recorded_observations(reference, _env(trained[kind]), 200, seed=7)
    want = reference.outputs(batch)
    for name, file in formats.FILES.items():
        report = metadata["portable"][name]["parity"]
        assert report["passed"] and report["observations"] == 300, report
        policy = tfrl.load_policy(version / file)
        got = policy.outputs(batch)
        assert set(got) == set(want)
        assert np.array_equal(policy(batch), want["action"]) or want["action"].dtype.kind == "f"
        for key, value in want.items():
            np.testing.assert_allclose(got[key].reshape(value.shape), value, rtol=1e-4, atol=1e-4)
    one = batch[0] if not reference.observations.structured else {k: batch[k][0] for k in batch.dtype.names}
    assert np.shape(tfrl.load_policy(version / "policy.tflite")(one)) == np.shape(want["action"][0])


def test_every_loader_refuses_nan_inf_and_out_of_range_observations_unless_allowed(trained, tmp_path):
    version = _export(trained["dqn"], tmp_path)
    for path in (version, version / "policy.tflite", version / "policy.onnx"):
        policy = tfrl.load_policy(path)
        for bad in (np.nan, np.inf, -np.inf, 1e39):
            with pytest.raises(UsageError, match=r"observations hold NaN or Inf \(or a number beyond float32's "
                                                 r"range\) at index \[0, 1\]"):
                policy.outputs(np.array([[0.0, bad, 0.0, 0.0]]))
        raw = tfrl.load_policy(path, allow_non_finite=True).outputs(np.array([[0.0, np.nan, 0.0, 0.0]]))
        assert raw["q_values"].shape == (1, 2), path  # what the network makes of it (a ReLU may hide the NaN)
        assert policy(np.zeros(4)) in (0, 1)


def test_a_file_beside_metadata_of_other_inputs_warns_and_runs_on_its_own_inputs(trained, tmp_path):
    version = _export(trained["sac_dict"], tmp_path)
    metadata_path = version / export.METADATA_DIR / export.METADATA_FILE
    metadata = json.loads(metadata_path.read_text())
    metadata["observation"]["fields"][0]["shape"] = [99]  # as if copied from another version
    metadata_path.write_text(json.dumps(metadata))
    for file in formats.FILES.values():
        with pytest.warns(UserWarning, match="the tfrl_metadata.json beside it describes the inputs"):
            policy = tfrl.load_policy(version / file)
        assert {field.shape for field in policy.fields} != {(99,)}  # the file's own


def test_portable_files_refuse_a_mask_that_allows_nothing_or_holds_a_2(trained, tmp_path):
    version = _export(trained["ppo_dict_mask"], tmp_path)
    state, mask = np.zeros((2, 10), np.float32), np.zeros((2, 10), np.uint8)
    mask[0, 4] = 1
    for file in formats.FILES.values():
        policy = tfrl.load_policy(version / file)
        with pytest.raises(UsageError, match="of row 1 allows no action"):
            policy({"state": state, "action_mask": mask})
        with pytest.raises(UsageError, match="must hold only 0 and 1"):
            policy({"state": state, "action_mask": np.maximum(mask * 2, 1)})
        mask[1, 7] = 1
        assert policy({"state": state, "action_mask": mask}).tolist() == [4, 7]
        assert set(policy.outputs({"state": state, "action_mask": mask})["no_legal_action"].tolist()) == {False}
        mask[1, 7] = 0


@pytest.mark.parametrize("quantize, agreement", [("float16", 0.97), ("int8", 0.90)])
def test_quantized_litert_files_are_smaller_and_within_their_tolerance(trained, tmp_path, quantize, agreement):
    plain = _export(trained["dqn_wide"], tmp_path / "plain", formats=("litert",))
    quantized = _export(trained["dqn_wide"], tmp_path / quantize, formats=("litert",), quantize=quantize)
    entry = export.read_metadata(quantized)["portable"]["litert"]
    assert entry["quantize"] == quantize and entry["parity"]["tolerance"]["agreement"] == agreement
    assert entry["parity"]["action_agreement"] >= agreement and entry["parity"]["passed"]
    shrink = {"float16": 0.55, "int8": 0.3}[quantize]  # 2 and 4 bytes per weight instead of 4
    assert (quantized / "policy.tflite").stat().st_size < shrink * (plain / "policy.tflite").stat().st_size


def test_a_failed_parity_check_writes_no_version_unless_allowed(trained, tmp_path, monkeypatch):
    monkeypatch.setitem(parity.TOLERANCES, ("litert", "int8"), (1.0, 0.0))  # int8 weights cannot be exact
    # The problems are listed output by output (the actions' agreement may fail too): q_values' is among them.
    with pytest.raises(UsageError, match=r"--format=litert: the converted policy differs from the SavedModel "
                                         r"\(.*q_values off by [^;]* allowed 0[;)].*nothing was written"):
        _export(trained["dqn_wide"], tmp_path, formats=("litert",), quantize="int8")
    assert export.version_numbers(tmp_path / "m") == []
    version = _export(trained["dqn_wide"], tmp_path, formats=("litert",), quantize="int8", allow_mismatch=True)
    assert not export.read_metadata(version)["portable"]["litert"]["parity"]["passed"]


def test_a_converter_that_cannot_express_the_policy_is_one_line_naming_the_format(trained, tmp_path, monkeypatch):
    def refuse(*_):
        raise RuntimeError("ConverterError: <unknown>:0: error: 'tf.SomeOp' op is neither a custom op nor a flex op\n"
                           "more detail")

    monkeypatch.setattr(convert, "_to_onnx", refuse)
    with pytest.raises(UsageError) as refused:
        _export(trained["dqn"], tmp_path)
    assert str(refused.value) == ("--format=onnx: the ONNX converter cannot express this policy (ConverterError: "
                                  "<unknown>:0: error: 'tf.SomeOp' op is neither a custom op nor a flex op)")
    assert export.version_numbers(tmp_path / "m") == []


def test_bad_format_requests_are_refused(trained):
    with pytest.raises(UsageError, match="--format: unknown format 'tflite'; choose from saved_model, litert, onnx"):
        formats.check_request(["saved_model", "tflite"], "none")
    with pytest.raises(UsageError, match="--litert_quantize: unknown quantization 'int4'"):
        formats.check_request(["litert"], "int4")
    with pytest.raises(UsageError, match="--litert_quantize=int8 applies to --format=litert"):
        formats.check_request(["saved_model", "onnx"], "int8")
    assert formats.check_request(["saved_model", "onnx", "litert", "onnx"], "none") == ("onnx", "litert")


def test_bad_files_and_arguments_are_one_clear_error(trained, tmp_path):
    broken = tmp_path / "policy.tflite"
    broken.write_bytes(b"not a flatbuffer")
    with pytest.raises(UsageError, match="cannot load it as litert, is it truncated or damaged"):
        tfrl.load_policy(broken)
    (tmp_path / "policy.onnx").write_bytes(b"\x00" * 10)
    with pytest.raises(UsageError, match="cannot load it as onnx"):
        tfrl.load_policy(tmp_path / "policy.onnx")
    with pytest.raises(UsageError, match="does not exist"):
        tfrl.load_policy(tmp_path / "missing.onnx")
    (tmp_path / "a_folder.tflite").mkdir()
    with pytest.raises(UsageError, match="a_folder.tflite is not a file"):
        tfrl.load_policy(tmp_path / "a_folder.tflite")
    version = _export(trained["dqn"], tmp_path / "ok", formats=("onnx",))
    with pytest.raises(UsageError, match="checkpoint and best apply to run directories only"):
        tfrl.load_policy(version / "policy.onnx", best=True)
    policy = tfrl.load_policy(version / "policy.onnx")
    with pytest.raises(UsageError, match=r"takes observations of shape \(4,\) .* got \(3, 5\)"):
        policy(np.zeros((3, 5), np.float32))
    with pytest.raises(UsageError, match="threads must be an integer >= 1"):
        tfrl.load_policy(version / "policy.onnx", threads=0)


# In a process where TensorFlow, Keras, gymnasium and absl cannot be imported (tests/tf_free.py), as in an install
# of tfrl with --no-deps beside NumPy and a runtime: load both files, answer, and check what was imported.
_TF_FREE = """
import numpy as np, tfrl
batch = np.load(sys.argv[2])
result = {"answers": {}}
for file in ("policy.tflite", "policy.onnx"):
    try:
        result["answers"][file] = tfrl.load_policy(sys.argv[1] + "/" + file)(batch).tolist()
    except tfrl.errors.UsageError as e:
        result["answers"][file] = str(e)
"""


def _tf_free(version, batch_file, *hidden):
    return tf_free.run_json(_TF_FREE, version, batch_file, hidden=hidden)


def test_the_files_load_and_answer_without_tensorflow(trained, tmp_path):
    version = _export(trained["dqn"], tmp_path)
    reference = serving.load(version)
    batch = parity.recorded_observations(reference, _env(trained["dqn"]), 50, seed=3)
    np.save(tmp_path / "batch.npy", batch)
    result = _tf_free(version, tmp_path / "batch.npy")
    assert result["answers"]["policy.tflite"] == reference.policy(batch).tolist()
    assert result["answers"]["policy.onnx"] == reference.policy(batch).tolist()
    assert not {"tensorflow", "keras", "gymnasium", "absl"} & set(result["loaded"]), result["loaded"]
    assert {"ai_edge_litert", "onnxruntime"} <= set(result["loaded"])

    missing = _tf_free(version, tmp_path / "batch.npy", "ai_edge_litert", "onnxruntime")["answers"]
    assert missing["policy.tflite"].endswith("needs ai-edge-litert, which is not installed: pip install 'tfrl[litert]'")
    assert missing["policy.onnx"].endswith("needs onnxruntime, which is not installed: pip install 'tfrl[onnx]'")


def test_the_export_command_writes_and_reports_every_format(trained, tmp_path):
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "export.py"), f"--run_dir={trained['sac']}", "--model_name=sac",
         f"--base_path={tmp_path}", "--format=saved_model,litert", "--format=onnx", "--litert_quantize=float16",
         "--parity_observations=200"], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.strip().splitlines()
    assert lines[0] == f"exported: {tmp_path / 'sac' / '1'}"
    assert lines[1].startswith(f"exported: {tmp_path / 'sac' / '1' / 'policy.tflite'} (parity on 200 observations: ")
    assert "action max error" in lines[1] and lines[2].startswith(f"exported: {tmp_path / 'sac' / '1' / 'policy.onnx'}")
    assert "XNNPACK" not in completed.stderr and "tf_tfl_flatbuffer_helpers" not in completed.stderr

    bad = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "export.py"), f"--run_dir={trained['sac']}",
                          "--model_name=sac2", f"--base_path={tmp_path}", "--format=onnx,tflite"],
                         capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == (
        "export.py: error: --format: unknown format 'tflite'; choose from saved_model, litert, onnx")
    assert not (tmp_path / "sac2").exists()
    zero = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "export.py"), f"--run_dir={trained['sac']}",
                           "--model_name=sac3", f"--base_path={tmp_path}", "--format=onnx", "--parity_observations=0"],
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert zero.returncode == 2 and zero.stderr.strip().splitlines()[-1] == (
        "export.py: error: --parity_observations must be in [1, 100000], got 0")
    assert not (tmp_path / "sac3").exists()


class _Answers:
    """A policy that answers fixed outputs (parity.compare reads outputs(batch) only)."""

    def __init__(self, **outputs):
        self._outputs = {name: np.asarray(value) for name, value in outputs.items()}

    def outputs(self, batch):
        return self._outputs


def test_near_tied_actions_are_contested_and_a_decisive_flip_is_not():
    # int8: actions must agree on 90 % of the uncontested rows, outputs stay within 5e-2 of their scale (here 1).
    # Rows 0-8 are near ties (margin 0.05 <= 2 * 5e-2); row 9 is decisive (margin 0.5).
    q = np.array([[0.50, 0.55]] * 9 + [[0.0, 0.5]])
    reference = _Answers(action=q.argmax(1), q_values=q)
    nudged = q + np.array([[0.03, -0.03]] * 9 + [[0.0, 0.0]])  # within 5e-2: the near ties swap
    report = parity.compare(reference, _Answers(action=nudged.argmax(1), q_values=nudged), np.zeros((10, 2)),
                            "litert", "int8")
    assert report["contested_rows"] == 9 and report["action_agreement_uncontested"] == 1.0 and report["passed"]
    assert report["action_agreement"] == 0.1  # what a user of the file sees: 9 of the 10 actions differ
    flipped = nudged.copy()
    flipped[9] = [0.5, 0.0]  # the decisive row flips: off by 0.5 and disagreeing
    report = parity.compare(reference, _Answers(action=flipped.argmax(1), q_values=flipped), np.zeros((10, 2)),
                            "litert", "int8")
    assert report["action_agreement_uncontested"] == 0.0 and not report["passed"]
    assert "action agrees on 0.0% of the uncontested observations" in report["summary"]
    broken = nudged.copy()
    broken[3, 0] = np.nan  # a NaN (or Inf) output fails however close the rest is
    report = parity.compare(reference, _Answers(action=nudged.argmax(1), q_values=broken), np.zeros((10, 2)),
                            "litert", "int8")
    assert np.isnan(report["max_error"]["q_values"]) and not report["passed"]


def test_illegal_logits_set_neither_the_scale_nor_the_ties():
    # A mask's illegal logits are -1e8: over the legal ones the scale is 2, and the rows' margins are 1.
    batch = np.zeros(2, [("observation", "f4", (1,)), ("action_mask", "u1", (3,))])
    batch["action_mask"] = [[1, 1, 0], [1, 0, 1]]
    logits = np.array([[1.0, 2.0, -1e8], [2.0, -1e8, 1.0]])
    reference = _Answers(action=np.array([1, 0]), logits=logits)

    def converted(nudge):
        return _Answers(action=np.array([1, 0]), logits=logits + nudge)

    # Off by 0.08 on a legal logit (0.08 / 2 = 4e-2: allowed) and by 5 on illegal ones (not compared).
    report = parity.compare(reference, converted([[0.08, 0, 5.0], [0, 5.0, 0]]), batch, "litert", "int8")
    assert report["contested_rows"] == 0 and report["max_error"]["logits"] == pytest.approx(0.04) and report["passed"]
    # Off by 0.5 on a legal logit: 0.25 of the scale, which the -1e8 would have hidden (0.5 / 1e8).
    report = parity.compare(reference, converted([[0.5, 0, 0], [0, 0, 0]]), batch, "litert", "int8")
    assert report["max_error"]["logits"] == pytest.approx(0.25) and not report["passed"]
