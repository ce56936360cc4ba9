"""The test folders mirror tfrl's wings; the helpers they share (custom_envs, serving_helpers, crash_points, ...)
sit here in tests/, which goes on sys.path for every test file (subprocesses get PYTHONPATH=tests themselves)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
