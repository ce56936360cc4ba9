"""Tests for benchmarks/summary.py: which table each suite shows, the numbers of a row by hand, the series still
being run, the section in place, bad input."""

import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import summary  # noqa: E402


def record(library, seed, started, return_mean, wall_s=100.0, total=None, suite="sac-x", cpu="Intel(R) Xeon(R)"):
    r = {"suite": suite, "library": library, "seed": seed, "env_id": "Pendulum-v1", "return_mean": return_mean,
         "started": started, "quick": False, "threads": 1, "wall_s": wall_s, "env_steps": 20032, "cpu": cpu}
    if total is not None:
        r["hparams"] = {"total_env_steps": total}
    return r


def write(path: pathlib.Path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_row_by_hand():
    tfrl = [record("tfrl", s, "2026-12-05 10:00", ret) for s, ret in enumerate([1.0, 2.0, 3.0, 4.0, 100.0])]
    sb3 = [record("SB3", s, "2026-12-05 10:00", 10.0, wall) for s, wall in enumerate([200, 400, 200, 250, 100])]
    sbx = [record("SBX", s, "2026-12-05 10:00", -5.0) for s in range(5)]
    runs, libs = summary.newest_table(tfrl + sb3 + sbx, 3)
    assert libs == ("tfrl", "SB3", "SBX") and len(runs) == 15
    line = summary.row(runs, libs)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:3] == ["sac-x", "Pendulum-v1, 20032", "0, 1, 2, 3, 4"]
    # IQM of 1, 2, 3, 4, 100: int(5 / 4) = 1 cut at each end, the mean of 2, 3, 4
    assert cells[3].startswith("3.0 [") and cells[4] == "10.0 [10.0, 10.0]" and cells[5] == "-5.0 [-5.0, -5.0]"
    # tfrl's 100 s over SB3's per seed: 0.5, 0.25, 0.5, 0.4, 1.0
    assert cells[6] == "0.50 [0.25, 1.00]" and cells[7] == "1.00 [1.00, 1.00]"
    assert cells[8] == "-"  # these records' curves have no clock
    assert cells[9] == "1; Intel Xeon; 2026-12-05"


def test_the_target_return_and_the_time_to_it_by_hand():
    def run(library, seed, curve):
        return {**record(library, seed, "2026-12-05 10:00", 0.0), "curve": curve}

    # Last training returns: tfrl 300, 240, 180; SB3 150, 90, 2386: the median of the six is (180 + 240) / 2 = 210.
    runs = [run("tfrl", 0, [[1000, 10.0, 100.0], [2000, 20.0, 300.0]]),
            run("tfrl", 1, [[1000, 12.0, 190.0], [2000, 24.0, 240.0]]),
            run("tfrl", 2, [[1000, 11.0, 50.0], [2000, 22.0, 180.0]]),
            run("SB3", 0, [[1000, 30.0, 100.0], [2000, 60.0, 150.0]]),
            run("SB3", 1, [[1000, 40.0, 80.0], [2000, 80.0, 90.0]]),
            run("SB3", 2, [[1000, 50.0, 2386.0], [2000, 100.0, 2386.0]])]
    assert summary.target_return(runs, ("tfrl", "SB3")) == 210
    # tfrl reaches 210 at 20.0 s (seed 0) and 24.0 s (seed 1), not on seed 2: median 22; SB3 only on seed 2, at 50 s.
    line = summary.row(runs, ("tfrl", "SB3"))
    assert "| 210: 22 (2/3) / 50 (1/3) |" in line
    assert (summary._round_down(2386.1), summary._round_down(-157.4), summary._round_down(0.0)) == (2300, -160, 0)


def test_sbx_shows_when_it_ran_on_the_tables_seeds_else_not_run():
    both = [record(lib, s, "2026-12-05 10:00", 1.0) for lib in ("tfrl", "SB3") for s in range(3)]
    sbx_two_seeds = [record("SBX", s, "2026-12-05 10:00", 1.0) for s in range(2)]
    runs, libs = summary.newest_table(both + sbx_two_seeds, 3)
    assert libs == ("tfrl", "SB3") and "| not run | " in summary.row(runs, libs)
    older_three = [record(lib, s, "2026-12-01 10:00", 1.0, total=10) for lib in summary.LIBS for s in range(3)]
    newer_two = [record(lib, s, "2026-12-05 10:00", 2.0, total=20) for lib in ("tfrl", "SB3") for s in range(3)]
    assert summary.newest_table(older_three + newer_two, 3) == (newer_two, ("tfrl", "SB3"))
    assert summary.newest_table(newer_two, 4) is None


def test_a_newer_series_with_fewer_seeds_is_named_and_an_older_one_is_not():
    table = [record(lib, s, "2026-12-05 10:00", 1.0, total=50000) for lib in ("tfrl", "SB3") for s in range(5)]
    newer = [record(lib, 0, "2026-12-06 02:20", 9.0, total=300000) for lib in ("tfrl", "SB3")]
    older = [record(lib, 0, "2026-12-01 02:20", 9.0, total=7) for lib in ("tfrl", "SB3")]
    assert summary.newest_partial(table + newer + older, table) == (newer[0], [0])
    assert summary.newest_partial(table + older, table) is None
    assert summary.newest_partial(older, None) == (older[0], [0])


def test_the_cli_writes_the_section_in_place_and_refuses_results_without_a_table(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    write(results / "compare-sac-x.jsonl", [record(lib, s, "2026-12-05 10:00", 1.0) for lib in summary.LIBS
                                            for s in range(3)])
    write(results / "compare-ppo-y.jsonl", [record(lib, 0, "2026-12-05 10:00", 1.0, suite="ppo-y")
                                            for lib in ("tfrl", "SB3")])
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n<!-- compare:summary start -->\nold\n<!-- compare:summary end -->\n\nrest\n")
    cmd = [sys.executable, str(REPO / "benchmarks" / "summary.py"), f"--results_dir={results}", f"--docs={docs}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    text = docs.read_text()
    assert text.startswith("# Benchmarks\n\n<!-- compare:summary start -->\n| suite |") and text.endswith("\n\nrest\n")
    assert "| sac-x | Pendulum-v1, 20032 | 0, 1, 2 |" in text and "old" not in text
    assert "fewer than 3 seeds so far (their blocks below): ppo-y at 20032 env steps (seed 0)." in text

    (results / "compare-sac-x.jsonl").unlink()
    before = docs.read_text()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "no suite in" in proc.stderr and "Traceback" not in proc.stderr
    assert docs.read_text() == before
