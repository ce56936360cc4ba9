"""Checkpoints against a lost or garbled TF state file, hand-edited JSON and arrays, states that do not fit the
run, and a full disk outside a checkpoint (tfrl.run.checkpoints, tfrl.run.metrics, tfrl.run.training_loop)."""

import json
import logging
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from tfrl import agents
from tfrl.agents.dqn.config import DQNConfig
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.run import checkpoints, training_loop
from tfrl.run.checkpoints import Checkpointer
from tfrl.run.metrics import MetricsWriteError, read_metrics


def _four_checkpoints(tmp_path, keep=3):
    """Checkpoints 1..4 of one variable (value = number); keep=3 leaves 2, 3, 4."""
    variable = tf.Variable(0.0)
    checkpointer = Checkpointer(tmp_path, {"v": variable}, keep=keep)
    for number in range(1, 5):
        variable.assign(float(number))
        checkpointer.save(number * 1000, {"at": number * 1000}, {"a": np.arange(number)})
    return variable


@pytest.mark.parametrize("damage", ["deleted", "garbled"])
def test_a_lost_state_file_loses_no_checkpoint(tmp_path, damage):
    variable = _four_checkpoints(tmp_path)
    state_file = tmp_path / "checkpoints" / "checkpoint"
    if damage == "deleted":
        state_file.unlink()
    else:
        state_file.write_text("garbage {{{ not a text proto")
    assert checkpoints.latest_checkpoint_number(tmp_path) == 4
    variable.assign(-1.0)
    checkpointer = Checkpointer(tmp_path, {"v": variable}, keep=3)
    assert checkpointer.restore_latest().number == 4 and float(variable.numpy()) == 4.0
    checkpointer.save(5000, {"at": 5000})
    assert checkpointer.numbers() == [5, 4, 3]  # the oldest beyond keep=3 go, nothing else
    assert Checkpointer(tmp_path, {"v": variable}).restore(3).env_step == 3000


def _edit_json(path: pathlib.Path, edit) -> None:
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("edit, why", [
    (lambda r: r.update(env_step=3999), "its checksum does not match its content"),
    (lambda r: r["loop_state"].update(at=1), "its checksum does not match its content"),
    (lambda r: r["arrays"]["a"].update(shape=[99999999]), "its checksum does not match its content"),
])
def test_a_hand_edited_json_is_damaged_and_the_previous_checkpoint_is_used(tmp_path, caplog, edit, why):
    variable = _four_checkpoints(tmp_path)
    _edit_json(tmp_path / "checkpoints" / "ckpt-4.json", edit)
    with caplog.at_level(logging.WARNING):
        restored = Checkpointer(tmp_path, {"v": variable}).restore_latest()
    assert (restored.number, restored.env_step, float(variable.numpy())) == (3, 3000, 3.0)
    assert np.array_equal(restored.arrays["a"], np.arange(3))
    assert any("checkpoint 4 is unusable" in r.getMessage() and why in r.getMessage() for r in caplog.records)


def test_replaced_arrays_are_damaged_and_the_previous_checkpoint_is_used(tmp_path, caplog):
    variable = _four_checkpoints(tmp_path)
    directory = tmp_path / "checkpoints"
    np.savez_compressed(directory / "ckpt-4.npz", a=np.arange(4) * 7)  # a valid npz, not the one written
    with caplog.at_level(logging.WARNING):
        restored = Checkpointer(tmp_path, {"v": variable}).restore_latest()
    assert restored.number == 3
    assert any("ckpt-4.npz" in r.getMessage() and "SHA-256 differs" in r.getMessage() for r in caplog.records)


def test_a_state_that_does_not_fit_the_run_falls_back_to_the_previous_checkpoint(tmp_path, caplog):
    variable = _four_checkpoints(tmp_path)
    applied = []

    def apply(restored):  # e.g. a replay of another capacity
        applied.append(restored.number)
        if restored.number == 4:
            raise ValueError("replay capacity 10 != the checkpoint's 99999999")

    with caplog.at_level(logging.WARNING):
        restored = Checkpointer(tmp_path, {"v": variable}).restore_latest(apply=apply)
    assert restored.number == 3 and applied == [4, 3] and float(variable.numpy()) == 3.0
    assert any("its state does not fit this run (ValueError: replay capacity 10" in r.getMessage()
               for r in caplog.records)


def test_format_1_checkpoints_without_checksums_still_load(tmp_path):
    variable = _four_checkpoints(tmp_path)
    _edit_json(tmp_path / "checkpoints" / "ckpt-4.json",
               lambda r: [r.pop("checksum"), r.pop("arrays_sha256"), r.update(format=1)])
    assert Checkpointer(tmp_path, {"v": variable}).restore_latest().number == 4


def test_a_full_disk_outside_a_checkpoint_stops_the_run_with_one_line_and_keeps_the_checkpoints(tmp_path,
                                                                                              monkeypatch):
    config = DQNConfig(total_env_steps=1200, hidden_sizes=(16,), batch_size=16, replay_capacity=500,
                       learning_starts=300, gradient_steps_per_train=1, eval_interval=0, final_eval_episodes=1,
                       log_interval=200, checkpoint_interval=400)
    runtime = Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")
    writer_type = type(tf.summary.create_file_writer(str(tmp_path / "probe")))
    real_flush, calls = writer_type.flush, []

    def flush(self):
        calls.append(1)
        # Each log record flushes twice (leaving as_default, then flush()): 7 is the 4th record's (env step 800),
        # before that env step's checkpoint.
        if len(calls) == 7:
            raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")
        return real_flush(self)

    monkeypatch.setattr(writer_type, "flush", flush)
    (tmp_path / "run").mkdir()
    with pytest.raises(MetricsWriteError) as raised:
        training_loop.train(agents.get("dqn"), config, "CartPole-v1", 0, runtime, tmp_path / "run",
                            training_loop.LoopOptions(progress_bar=False))
    assert str(raised.value) == (f"cannot write the run's metrics in {tmp_path / 'run'} (No space left on device); "
                                 "training stopped: checkpoint 1 (env step 400) is the newest")
    assert raised.value.exit_code == 1
    assert checkpoints.latest_checkpoint_number(tmp_path / "run") == 1
    assert [r["env_step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"][-1] == 800
