"""What compare.py, summary.py and profiles.py share: the run records of benchmarks/results/*.jsonl, the sections
they write between markers in a Markdown file, and the number formats of their tables. Imports none of them."""

from __future__ import annotations

import json
import math
import pathlib
import statistics
import sys
from typing import Sequence

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tfrl from this checkout
from tfrl.errors import UsageError  # noqa: E402

LIBRARY_NAMES = ("tfrl", "SB3", "SBX")  # the runners' names in the records (compare.LIBRARIES)
# What a results line holds at least (compare.py writes it; profiles.py reads the same files).
RECORD_FIELDS = ("suite", "library", "seed", "threads", "started", "env_id", "return_mean")


def median_spread(values: Sequence[float], digits: int) -> str:
    """"median [min, max]" over seeds; the median alone for one seed."""
    median = f"{statistics.median(values):.{digits}f}"
    if len(values) == 1:
        return median
    return f"{median} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def time_to_return(record: dict, target: float) -> tuple[int, float] | None:
    """(env step, training seconds) of the run's first log interval whose training episodes' mean return
    reached `target`, or None."""
    for env_step, seconds, mean_return in record["curve"]:
        if mean_return >= target:
            return env_step, seconds
    return None


def write_section(docs_path: pathlib.Path, suite_name: str, section: str) -> None:
    """Replaces the text between the suite's markers, or appends the markers and section at the end."""
    start, end = f"<!-- compare:{suite_name} start -->", f"<!-- compare:{suite_name} end -->"
    docs_path.parent.mkdir(parents=True, exist_ok=True)
    text = docs_path.read_text() if docs_path.exists() else ""
    block = f"{start}\n{section.rstrip()}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block + "\n"
    docs_path.write_text(text)


def read_results_file(path: pathlib.Path) -> list[dict]:
    """The run records of a results file; UsageError naming the first line that is not one (a field of
    RECORD_FIELDS missing, or a return that is not a finite number)."""
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not set(RECORD_FIELDS) <= set(record):
                raise ValueError(f"{', '.join(RECORD_FIELDS)} are needed")
            if not math.isfinite(float(record["return_mean"])):
                raise ValueError(f"return_mean {record['return_mean']} is not finite")
        except (ValueError, TypeError) as e:
            raise UsageError(f"{path}:{number}: not a compare.py run record ({e})") from None
        records.append(record)
    return records


def newest_side_by_side(records: Sequence[dict], names: Sequence[str]) -> dict[int, list[dict]]:
    """Seed -> one record per library of `names` (in that order), from the newest compare.py run (started stamp)
    that ran the seed for every one of them; seeds no run completed are left out."""
    by_seed = {}
    for r in records:
        if r["library"] in names:
            by_seed.setdefault(r["seed"], {}).setdefault(r["started"], {})[r["library"]] = r
    found = {}
    for seed, runs_by_start in by_seed.items():
        complete = [started for started, runs in runs_by_start.items() if set(runs) == set(names)]
        if complete:
            found[seed] = [runs_by_start[max(complete)][name] for name in names]
    return found
