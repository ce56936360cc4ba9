"""Tests for tfrl.models.export, tfrl.run.runs.export_run and scripts/export.py.

The exported signature must give the live online network's greedy actions, load
in a process where tfrl cannot be imported, and show up in saved_model_cli.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfrl
from tfrl import config as config_lib
from tfrl.agents.dqn import policy as dqn_policy
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, ReplayBatch
from tfrl.envs import EnvInfo
from tfrl.errors import UsageError
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import export, numpy_networks
from tfrl.run import checkpoints

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPORT = str(REPO_ROOT / "scripts" / "export.py")
INFO = EnvInfo(env_id="CartPole-v1", obs_shape=(4,), num_actions=2)
CONFIG = DQNConfig(hidden_sizes=(16, 16), batch_size=8, dueling=True)


def _trained_learner(seed: int) -> DQNLearner:
    keras.utils.set_random_seed(seed)  # a fixed initialization: one under which both actions are greedy somewhere
    learner = DQNLearner(CONFIG, INFO, Runtime(options=RuntimeOptions(), device_name="/device:CPU:0"))
    rng = np.random.default_rng(seed)
    for _ in range(3):  # weights away from their initialization
        k, b = 2, 8
        learner.update(ReplayBatch({"obs": rng.normal(size=(k, b, 4)).astype(np.float32),
                       "action": rng.integers(0, 2, (k, b), dtype=np.int32),
                       "reward": rng.normal(size=(k, b)).astype(np.float32),
                       "discount": np.full((k, b), 0.99, np.float32),
                       "next_obs": rng.normal(size=(k, b, 4)).astype(np.float32)}, update_target=True))
    return learner


def _observations(n=256, seed=0) -> np.ndarray:
    return (2.0 * np.random.default_rng(seed).normal(size=(n, 4))).astype(np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(learner, base_path, version dir 1) of an export of a trained learner's online network."""
    learner = _trained_learner(seed=0)
    base_path = tmp_path_factory.mktemp("export") / "saved_models"
    policy = dqn_policy.serving_policy(CONFIG, INFO, q_network=learner.online)
    version_dir = export.export_saved_model(policy, INFO.obs_shape, base_path, "cartpole", {"agent": "dqn"})
    return learner, base_path, version_dir


def test_exported_actions_are_the_live_networks_greedy_actions(exported):
    learner, _, version_dir = exported
    signature = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    assert signature.structured_input_signature == (
        (), {"observation": tf.TensorSpec([None, 4], tf.float32, name="observation")})
    obs = _observations()
    outputs = signature(observation=tf.constant(obs))
    assert set(outputs) == {"action", "q_values"}
    assert outputs["action"].dtype == tf.int64 and outputs["q_values"].dtype == tf.float32
    q_online = learner.online(obs).numpy()  # [256, 2]
    np.testing.assert_array_equal(outputs["action"].numpy(), np.argmax(q_online, axis=-1))
    np.testing.assert_allclose(outputs["q_values"].numpy(), q_online, rtol=1e-6, atol=1e-6)
    # The actor's NumPy mirror acts greedily the same way.
    np.testing.assert_array_equal(np.argmax(numpy_networks.NumpyQNetwork(learner.online)(obs), axis=-1),
                                  outputs["action"].numpy())
    assert 0 < outputs["action"].numpy().mean() < 1  # both actions occur: the comparison means something


def test_each_export_is_the_next_integer_version_and_leaves_no_temp_dir(exported):
    learner, base_path, version_dir = exported
    model_dir = base_path / "cartpole"
    assert version_dir == model_dir / "1"
    assert (version_dir / "saved_model.pb").exists() and (version_dir / "variables").is_dir()
    assert export.read_metadata(version_dir) == {"agent": "dqn"}
    assert (version_dir / "assets.extra" / "tfrl_metadata.json").exists()
    policy = dqn_policy.serving_policy(CONFIG, INFO, q_network=learner.online)
    assert export.export_saved_model(policy, (4,), base_path, "cartpole", {}).name == "2"
    (model_dir / "7").mkdir()  # e.g. a version copied in by hand; not-a-number names are ignored
    (model_dir / "latest").mkdir()
    assert export.export_saved_model(policy, (4,), base_path, "cartpole", {}).name == "8"
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "2", "7", "8", "latest"]
    with pytest.raises(UsageError, match="plain directory name"):
        export.export_saved_model(policy, (4,), base_path, "a/b", {})


def _saved_model_cli() -> list[str]:
    found = shutil.which("saved_model_cli")
    return [found] if found else [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"]


def test_the_export_loads_without_tfrl_and_saved_model_cli_shows_the_signature(exported, tmp_path):
    learner, _, version_dir = exported
    obs = _observations(n=32, seed=1)
    code = textwrap.dedent(f"""
        import json, sys
        sys.modules["tfrl"] = None  # any import of tfrl now raises ImportError
        try:
            import tfrl
        except ImportError:
            pass
        else:
            raise SystemExit("tfrl is importable")
        import numpy as np
        import tensorflow as tf
        signature = tf.saved_model.load({str(version_dir)!r}).signatures["serving_default"]
        actions = signature(observation=tf.constant(np.array({obs.tolist()!r}, np.float32)))["action"]
        print(json.dumps({{"actions": actions.numpy().tolist(), "tfrl_loaded": "tfrl" in sys.modules
                          and sys.modules["tfrl"] is not None}}))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    load = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)  # cwd outside the repo: "" on sys.path finds no tfrl
    show = subprocess.run([*_saved_model_cli(), "show", "--all", "--dir", str(version_dir)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=180)
    stdout, stderr = load.communicate(timeout=180)
    assert load.returncode == 0, stderr[-3000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result == {"actions": np.argmax(learner.online(obs).numpy(), axis=-1).tolist(), "tfrl_loaded": False}

    assert show.returncode == 0, show.stderr[-3000:]
    listing = show.stdout
    assert "signature_def['serving_default']" in listing
    for line in ("inputs['observation'] tensor_info:", "outputs['action'] tensor_info:",
                 "outputs['q_values'] tensor_info:", "dtype: DT_INT64", "shape: (-1, 4)"):
        assert line in listing, line


def _write_run(run_dir: pathlib.Path) -> list[np.ndarray]:
    """A run dir as train.py leaves it (config.json, checkpoints 1 and 2); returns Q-values [256, 2] at each."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({
        "agent": "dqn", "env_id": "CartPole-v1", "env_arg": "CartPole-v1", "seed": 5, "preset": None,
        "hparams": config_lib.to_dict(CONFIG), "runtime": {"mixed_precision": "float32"}}))
    learner = _trained_learner(seed=1)
    checkpointer = checkpoints.Checkpointer(run_dir, learner.checkpoint_items())
    q_values = []
    for env_step in (777, 1554):
        checkpointer.save(env_step, {}, {})
        q_values.append(learner.online(_observations()).numpy())
        learner.online.set_weights([w * 1.5 for w in learner.online.get_weights()])
    return q_values


def _run_scripts(arg_lists, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    processes = [subprocess.Popen([sys.executable, EXPORT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env, cwd=cwd) for args in arg_lists]
    results = []
    for process in processes:  # started together: the two cores import TensorFlow in parallel
        stdout, stderr = process.communicate(timeout=240)
        results.append((process.returncode, stdout, stderr))
    return results


def test_export_script_from_a_checkpoint_and_its_usage_errors(tmp_path):
    run_dir = tmp_path / "run"
    q_values = _write_run(run_dir)
    base = tmp_path / "serving"
    ok, *errors = _run_scripts([
        [f"--run_dir={run_dir}", "--checkpoint=1", "--model_name=cartpole", f"--base_path={base}"],
        ["--run_dir=does-not-exist", "--model_name=m"],
        [f"--run_dir={run_dir}", "--checkpoint=9", "--model_name=m"],
        [f"--run_dir={run_dir}"],
        ["--model_name=m", "--no_such_flag=1"],
    ], cwd=tmp_path)

    returncode, stdout, stderr = ok
    assert returncode == 0, stderr[-3000:]
    version_dir = base / "cartpole" / "1"
    assert f"exported: {version_dir}" in stdout
    signature = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    got = signature(observation=tf.constant(_observations()))["q_values"].numpy()
    np.testing.assert_allclose(got, q_values[0], rtol=1e-6, atol=1e-6)  # checkpoint 1, not the newest (2)
    metadata = export.read_metadata(version_dir)
    assert metadata["agent"] == "dqn" and metadata["env_id"] == "CartPole-v1"
    assert metadata["observation"] == {"shape": [4], "dtype": "float32"}
    assert metadata["action_space"] == {"type": "Discrete", "n": 2}
    assert metadata["train_env_steps"] == 777 and metadata["checkpoint"] == 1 and metadata["seed"] == 5
    assert metadata["config"] == config_lib.to_dict(CONFIG) and metadata["tfrl_version"] == tfrl.__version__
    assert metadata["signature"]["outputs"] == {"action": "int64 [None]", "q_values": "float32 [None, 2]"}

    expected = ["export.py: error: run directory does-not-exist does not exist",
                f"export.py: error: checkpoint 9 does not exist in {run_dir / 'checkpoints'} (available: 1, 2)",
                "export.py: error: --run_dir and --model_name are required",
                "export.py: error: Unknown command line flag 'no_such_flag'"]
    for (returncode, _, stderr), want in zip(errors, expected):
        assert returncode == 2, stderr[-3000:]
        assert "Traceback" not in stderr
        assert stderr.strip().splitlines()[-1].startswith(want), stderr[-1000:]
