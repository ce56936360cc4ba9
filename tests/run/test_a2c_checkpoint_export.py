"""A2C checkpoints and export through scripts/train.py: the export is the restored network's greedy policy,
and a run killed with SIGKILL resumes from its checkpoint and finishes (learning-rate schedule included)."""

import json

import numpy as np
import pytest
import tensorflow as tf

from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.a2c.learning import A2CLearner
from tfrl.envs import EnvInfo
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import export, numpy_networks
from tfrl.run import checkpoints, runs
from tfrl.run.metrics import read_metrics
from test_checkpoints import _Run, _without_tf_noise  # tests/ is on sys.path (pytest rootdir insertion)

INFO = EnvInfo(env_id="CartPole-v1", obs_shape=(4,), num_actions=2)
# --preset=none: 8 envs x 5 steps = 40 env steps per update, so every total and interval below is whole updates.
STEPS_PER_UPDATE = 40


def _train_args(run_dir, *hps):
    return ["--agent=a2c", "--env=CartPole-v1", "--preset=none", "--seed=2", f"--run_dir={run_dir}",
            "--hp=eval_interval=0", "--hp=final_eval_episodes=2", *[f"--hp={hp}" for hp in hps]]


def _logs(tmp_path, run_dir) -> str:
    text = "".join(f"--- {p.name}\n{_without_tf_noise(p.read_text())[-2500:]}\n" for p in sorted(tmp_path.glob("*.err")))
    metrics = run_dir / "metrics.jsonl"
    return text + ("--- metrics.jsonl\n" + metrics.read_text()[-3000:] if metrics.exists() else "")


def _saved_model(run_dir):
    model_dir = run_dir / "saved_models" / "a2c-CartPole-v1"
    versions = export.version_numbers(model_dir)
    assert versions, f"no export in {model_dir}"
    return model_dir / str(versions[-1])


def test_a2c_run_checkpoints_and_exports_the_greedy_policy_of_its_final_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    run = _Run(_train_args(run_dir, "total_env_steps=4000", "checkpoint_interval=1000"), tmp_path, "train")
    assert run.process.wait(timeout=120) == 0, _logs(tmp_path, run_dir)
    assert "exported: " in run.stdout_path.read_text()

    # Periodic checkpoints at 1000, 2000, 3000 and the final one at 4000 (which the periodic one at 4000 is):
    # the newest 3 are kept.
    checkpointer = checkpoints.Checkpointer(run_dir, {})
    assert checkpointer.numbers() == [4, 3, 2]
    config = A2CConfig(total_env_steps=4000, checkpoint_interval=1000)
    learner = A2CLearner(config, INFO, Runtime(options=RuntimeOptions(), device_name="/device:CPU:0"))
    restored = checkpoints.Checkpointer(run_dir, learner.checkpoint_items()).restore_latest()
    assert restored.env_step == 4000 and restored.arrays == {}
    assert int(learner.updates.numpy()) == 4000 // STEPS_PER_UPDATE
    assert set(restored.loop_state) == {"next_log_at", "next_eval_at", "next_checkpoint_at", "wall_time_s", "actor_rng",
                                        "train_metrics"}

    version_dir = _saved_model(run_dir)
    metadata = export.read_metadata(version_dir)
    assert (metadata["agent"], metadata["train_env_steps"], metadata["checkpoint"]) == ("a2c", 4000, 4)
    signature = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    assert signature.structured_input_signature == (
        (), {"observation": tf.TensorSpec([None, 4], tf.float32, name="observation")})

    obs = (2.0 * np.random.default_rng(0).normal(size=(256, 4))).astype(np.float32)
    outputs = signature(observation=tf.constant(obs))
    assert set(outputs) == {"action", "logits", "value"}
    assert outputs["action"].dtype == tf.int64 and outputs["action"].shape == (256,)
    assert outputs["logits"].dtype == tf.float32 and outputs["logits"].shape == (256, 2)
    assert outputs["value"].dtype == tf.float32 and outputs["value"].shape == (256,)
    logits, value = learner.network(obs)  # the live network, restored from the final checkpoint
    np.testing.assert_array_equal(outputs["action"].numpy(), np.argmax(logits.numpy(), axis=-1))
    np.testing.assert_allclose(outputs["logits"].numpy(), logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outputs["value"].numpy(), value.numpy(), rtol=1e-5, atol=1e-5)
    # The actor's NumPy mirror evaluates the same greedy actions, and so does tfrl.run.runs' restored policy.
    mirror_logits, _ = numpy_networks.NumpyActorCritic(learner.network)(obs)
    np.testing.assert_array_equal(np.argmax(mirror_logits, axis=-1), outputs["action"].numpy())
    loaded = runs.load_policy(run_dir)
    assert (loaded.checkpoint, loaded.env_step) == (4, 4000)
    np.testing.assert_array_equal(loaded.policy.outputs(tf.constant(obs))["action"].numpy(), outputs["action"].numpy())
    assert 0 < outputs["action"].numpy().mean() < 1  # both actions occur: the comparison means something


def test_a2c_run_killed_with_sigkill_resumes_and_finishes(tmp_path):
    run_dir = tmp_path / "run"
    total, interval = 20_000, 2_000
    learning_rate = 1e-3
    args = _train_args(run_dir, f"total_env_steps={total}", f"checkpoint_interval={interval}",
                       f"log_interval={interval}", "lr_schedule=linear", f"learning_rate={learning_rate}")

    run = _Run(args, tmp_path, "1")
    run.wait_for(lambda: (checkpoints.latest_checkpoint_number(run_dir) or 0) >= 1, "the first checkpoint")
    run.kill()
    first = checkpoints.latest_checkpoint_number(run_dir)
    first_step = json.loads((run_dir / "checkpoints" / f"ckpt-{first}.json").read_text())["env_step"]
    if first_step >= total:
        pytest.skip("the first run finished before it was killed")  # the kill came too late to test anything

    run = _Run(args, tmp_path, "2")
    assert run.process.wait(timeout=120) == 0, _logs(tmp_path, run_dir)
    assert f"restored checkpoint {first} (env step {first_step})" in run.stderr(), _logs(tmp_path, run_dir)
    assert "exported: " in run.stdout_path.read_text()

    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["env_step"] for r in records if r["kind"] == "resume"] == [first_step], _logs(tmp_path, run_dir)
    final = [r for r in records if r["kind"] == "final_eval"]
    assert len(final) == 1 and final[0]["env_step"] == total, _logs(tmp_path, run_dir)
    assert final[0]["updates"] == final[0]["gradient_steps"] == total // STEPS_PER_UPDATE
    train = [r for r in records if r["kind"] == "train"]
    assert [r["env_step"] for r in train] == list(range(interval, total + 1, interval)), _logs(tmp_path, run_dir)
    for r in train:  # the linear schedule continues from the restored env step: the rate of the logged update's
        rollout_start = r["env_step"] - STEPS_PER_UPDATE  # rollout, which started one update before the record
        assert r["learning_rate"] == pytest.approx(learning_rate * (1 - rollout_start / total), rel=1e-6), r
        assert r["updates"] == r["env_step"] // STEPS_PER_UPDATE, r
    assert export.read_metadata(_saved_model(run_dir))["train_env_steps"] == total
