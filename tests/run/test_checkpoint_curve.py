"""benchmarks/checkpoint_curve.py on a short A2C run that kept every checkpoint (the loop's keep_checkpoints=None).

The curve's "periodic" column must equal what the loop's own periodic evaluations logged at the same env steps
(the same policy on the same episodes), and its "final" column at the last checkpoint the run's final evaluation.
"""

import json
import pathlib
import subprocess
import sys

import pytest

from tfrl.errors import UsageError
from tfrl.hardware import runtime as runtime_lib
from tfrl.run import CONFIG_FILE

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

import checkpoint_curve  # noqa: E402

SEED = 5


def test_the_curve_of_a_run_that_kept_every_checkpoint_matches_its_own_evaluations(tmp_path):
    from tfrl import agents
    from tfrl.run import training_loop
    from tfrl.agents.a2c.config import A2CConfig

    config = A2CConfig(total_env_steps=4000, num_envs=4, rollout_length=5, hidden_sizes=(16,), learning_rate=3e-3,
                       eval_interval=1000, eval_episodes=3, final_eval_episodes=3, log_interval=10**9,
                       checkpoint_interval=1000)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / CONFIG_FILE).write_text(json.dumps({"agent": "a2c", "env_id": "CartPole-v1", "seed": SEED,
                                                         "hparams": {"hidden_sizes": [16]}}))
    runtime = runtime_lib.apply(runtime_lib.RuntimeOptions())
    final = training_loop.train(agents.get("a2c"), config, "CartPole-v1", SEED, runtime, run_dir,
                                training_loop.LoopOptions(progress_bar=False, keep_checkpoints=None))

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = {r["env_step"]: r["return_mean"] for r in records if r["kind"] == "eval"}
    assert sorted(evals) == [1000, 2000, 3000, 4000]
    assert len(set(evals.values())) > 1, evals  # the policies differ, so matching them up means something

    rows = checkpoint_curve.checkpoint_curve(run_dir, episodes=3)
    # Every checkpoint kept (the default keeps 3); the end of training fell on the periodic one at 4000.
    assert [(r["checkpoint"], r["env_step"]) for r in rows] == [(1, 1000), (2, 2000), (3, 3000), (4, 4000)]
    for row in rows:
        assert row["periodic_return_mean"] == pytest.approx(evals[row["env_step"]]), row
    assert rows[-1]["final_return_mean"] == pytest.approx(final["return_mean"])


def test_a_missing_run_dir_exits_2_with_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "rows.jsonl"
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "checkpoint_curve.py"), f"--run_dir={tmp_path / 'nope'}",
         f"--out={out}"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.strip().splitlines()[-1] == (
        f"checkpoint_curve.py: error: --run_dir must be a run directory, got '{tmp_path / 'nope'}'")
    assert "Traceback" not in completed.stderr and not out.exists()


def test_a_run_without_checkpoints_is_a_usage_error(tmp_path):
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"agent": "a2c", "env_id": "CartPole-v1", "seed": SEED,
                                                          "hparams": {}}))
    with pytest.raises(UsageError, match="--run_dir: .* has no checkpoint"):
        checkpoint_curve.checkpoint_curve(tmp_path, episodes=1)
