"""Tests for benchmarks/profiles.py: which runs count, the normalization, the section it writes, bad input."""

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import profiles  # noqa: E402


def record(library, seed, started, return_mean, quick=False, suite="dqn-cartpole", env_id="CartPole-v1"):
    return {"suite": suite, "library": library, "seed": seed, "env_id": env_id, "return_mean": return_mean,
            "started": started, "quick": quick, "threads": 1}


def test_the_newest_run_with_every_library_on_the_same_seeds_counts():
    old = [record(lib, seed, "2026-12-01 10:00", 1.0) for lib in ("tfrl", "SB3", "SBX") for seed in (0, 1, 2)]
    partial = [record(lib, seed, "2026-12-02 10:00", 2.0) for lib in ("tfrl", "SB3") for seed in (0, 1, 2)]
    partial += [record("SBX", seed, "2026-12-02 10:00", 2.0) for seed in (0, 1)]  # SBX on 2 seeds only
    quick = [record(lib, seed, "2026-12-03 10:00", 3.0, quick=True) for lib in ("tfrl", "SB3", "SBX")
             for seed in (0, 1, 2)]
    records = old + partial + quick
    assert profiles.newest_complete_run(records, ["tfrl", "SB3", "SBX"], 3) == old
    assert profiles.newest_complete_run(records, ["tfrl", "SB3"], 3) == partial[:6]
    assert profiles.newest_complete_run(records, ["tfrl", "SB3", "SBX"], 4) is None
    shifted = [record("tfrl", seed, "2026-12-04 10:00", 4.0) for seed in (0, 1, 2)]
    shifted += [record("SB3", seed, "2026-12-04 10:00", 4.0) for seed in (1, 2, 3)]  # not the same seeds
    assert profiles.newest_complete_run(shifted + old, ["tfrl", "SB3"], 3) == old[:6]


def test_scores_are_normalized_between_random_and_reference():
    runs = [record("tfrl", 1, "t", 100.0), record("tfrl", 0, "t", -100.0), record("SB3", 0, "t", 0.0)]
    # (return - (-100)) / (100 - (-100)), by seed
    assert profiles.normalized_scores(runs, ["tfrl", "SB3"], random=-100.0, reference=100.0) == {
        "tfrl": [0.0, 1.0], "SB3": [0.5]}


def test_the_section_from_results_files(tmp_path):
    # CartPole: reference 500, random play about 22. tfrl at 500 scores 1.0 on every seed; SB3 at 250 about 0.48.
    rows = [record("tfrl", seed, "2026-12-05 10:00", 500.0) for seed in (0, 1, 2)]
    rows += [record("SB3", seed, "2026-12-05 10:00", 250.0) for seed in (0, 1, 2)]
    (tmp_path / "compare-dqn-cartpole.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "compare-other.jsonl").write_text(json.dumps(record("tfrl", 0, "2026-12-05 10:00", 1.0)) + "\n")
    suites = profiles.collect(tmp_path, ["tfrl", "SB3"], 3)
    assert [s["suite"] for s in suites] == ["dqn-cartpole"]  # compare-other: one library, one seed
    assert 10.0 < suites[0]["random"] < 40.0
    section = profiles.markdown(suites, ["tfrl", "SB3"], profiles.profiles(suites, ["tfrl", "SB3"]), "cmd")
    assert "| tau = 0.25 | 1.00 [1.00, 1.00] | 1.00 [1.00, 1.00] |" in section
    assert "| tau = 0.5 | 1.00 [1.00, 1.00] | 0.00 [0.00, 0.00] |" in section
    assert "| tau = 1 | 0.00 [0.00, 0.00] | 0.00 [0.00, 0.00] |" in section  # "above": 1.0 is not above 1
    assert "| dqn-cartpole | 2026-12-05 10:00 | 3 |" in section


@pytest.mark.parametrize("args, message", [
    (["--libs=tfrl"], "--libs: two or more of"),
    (["--libs=tfrl,Torch"], "--libs: two or more of"),
    (["--min_seeds=9"], "no suite has a run with 9+ seeds"),
    (["--min_seeds=0"], "--min_seeds must be >= 1"),
    (["--results_dir={bad}"], "compare-dqn-cartpole.jsonl:2: not a compare.py run record (return_mean nan is not finite)"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, message):
    rows = [record(lib, seed, "2026-12-05 10:00", 100.0) for lib in ("tfrl", "SB3", "SBX") for seed in (0, 1, 2)]
    (tmp_path / "compare-dqn-cartpole.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    bad = tmp_path / "bad"
    bad.mkdir()
    nan_row = {**rows[1], "return_mean": float("nan")}  # json writes NaN, and reads it back
    (bad / "compare-dqn-cartpole.jsonl").write_text(json.dumps(rows[0]) + "\n" + json.dumps(nan_row) + "\n")
    args = [arg.format(bad=bad) for arg in args]
    docs = tmp_path / "docs" / "benchmarks.md"
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "profiles.py"), f"--results_dir={tmp_path}",
                             f"--docs={docs}", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert not (tmp_path / "docs").exists()


def test_runs_of_the_same_settings_join_across_compare_runs_as_reuse_joins_them():
    def run(lib, seed, started, ret, total=50000):
        return {**record(lib, seed, started, ret), "threads": 1, "hparams": {"total_env_steps": total}}

    first = [run(lib, seed, "2026-12-05 20:08", 1.0) for lib in ("tfrl", "SB3") for seed in (0, 1, 2)]
    later = [run(lib, seed, "2026-12-05 22:01", 2.0) for lib in ("tfrl", "SB3") for seed in (3, 4)]
    rerun = [run("tfrl", 1, "2026-12-05 23:00", 3.0)]  # tfrl alone: seed 1 keeps its side-by-side pair
    other = [run(lib, seed, "2026-12-06 09:00", 9.0, total=300000) for lib in ("tfrl", "SB3") for seed in (0, 1)]
    records = first + later + rerun + other
    assert profiles.newest_complete_run(records, ["tfrl", "SB3"], 5) == first + later
    # With 2 seeds enough, the newest settings (300k, seeds 0-1) count instead.
    assert profiles.newest_complete_run(records, ["tfrl", "SB3"], 2) == other
