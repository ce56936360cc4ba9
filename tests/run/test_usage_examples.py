"""The runnable examples of docs/usage.md's section on Dict observations, action masks and multi-part actions:
each Python block runs as written (in a scratch directory) and prints what its comments say."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

USAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "usage.md"
SECTION = "## Dict observations, action masks, multi-part actions"


def python_blocks() -> list[str]:
    text = USAGE.read_text()
    start = text.index(SECTION)
    section = text[start:text.index("\n## ", start + len(SECTION))]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def expected_prints(block: str) -> list[str]:
    """What each print(...) line's comment says it prints: the comment up to " (" (the rest explains it)."""
    return [line.split("  # ", 1)[1].split(" (")[0] for line in block.splitlines()
            if line.startswith("print(") and "  # " in line]


def test_the_section_has_examples_whose_prints_say_what_they_print():
    blocks = python_blocks()
    assert len(blocks) == 3 and all(expected_prints(block) for block in blocks)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_usage_example_runs_and_prints_what_its_comments_say(tmp_path, index):
    block = python_blocks()[index]
    env = dict(os.environ)
    env.pop("KERAS_BACKEND", None)
    completed = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.splitlines() == expected_prints(block), completed.stdout
