"""Tests for tfrl.run.metrics: a resumed run's metrics.jsonl and TensorBoard logs drop the orphaned records."""

import json
import time

import tensorflow as tf
from tensorboard.backend.event_processing import plugin_event_accumulator

from tfrl.run.metrics import MetricsLogger, read_metrics


def _log_losses(run_dir, steps, offset, start_env_step=0):
    logger = MetricsLogger(run_dir, total_env_steps=100, progress_bar=False, start_env_step=start_env_step)
    for step in steps:
        logger.log("train", step, {"loss": step + offset})
    logger.close()


def test_a_resume_marker_drops_the_records_logged_after_the_checkpoint(tmp_path):
    # Crashed at step 40 after a checkpoint at step 20; resumed from that checkpoint.
    _log_losses(tmp_path, (10, 20, 30, 40), offset=0.0)
    # Events files are named by creation second, and TensorBoard reads them in name order; a real resume
    # starts seconds after the crashed process did.
    time.sleep(1.1)
    _log_losses(tmp_path, (30, 40, 50), offset=0.5, start_env_step=20)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["kind"], r["env_step"], r.get("loss")) for r in records] == [
        ("train", 10, 10.0), ("train", 20, 20.0), ("resume", 20, None),
        ("train", 30, 30.5), ("train", 40, 40.5), ("train", 50, 50.5)]

    # TensorBoard's Python loader purges them too (a SessionLog.START event at step 21).
    accumulator = plugin_event_accumulator.EventAccumulator(str(tmp_path / "tensorboard"),
                                                            size_guidance={"tensors": 0})
    accumulator.Reload()
    points = [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in accumulator.Tensors("train/loss")]
    assert points == [(10, 10.0), (20, 20.0), (30, 30.5), (40, 40.5), (50, 50.5)]


def test_a_line_cut_by_the_crash_is_skipped_and_the_marker_stays_a_line_of_its_own(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"kind": "train", "env_step": 10, "loss": 1.0}) + '\n{"kind": "train", "env_st')
    _log_losses(tmp_path, (20,), offset=0.0, start_env_step=10)
    assert [(r["kind"], r["env_step"]) for r in read_metrics(path)] == [("train", 10), ("resume", 10), ("train", 20)]


def test_a_fresh_run_has_no_resume_marker(tmp_path):
    _log_losses(tmp_path, (10,), offset=0.0)
    assert [r["kind"] for r in read_metrics(tmp_path / "metrics.jsonl")] == ["train"]
    assert not list((tmp_path / "tensorboard").glob("*restart*"))
