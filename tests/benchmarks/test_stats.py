"""Tests for benchmarks/stats.py: the IQM and the stratified bootstrap, by hand."""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import stats  # noqa: E402


def test_iqm_cuts_a_quarter_of_the_runs_at_each_end():
    assert stats.iqm([1, 2, 3, 4, 100]) == 3.0  # 5 runs: 1 cut each end, mean(2, 3, 4)
    assert stats.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5  # 8 runs: 2 cut each end, mean(3, 4, 5, 6)
    assert stats.iqm([10, 20, 90]) == 40.0  # 3 runs: int(3 / 4) = 0 cut, the mean
    assert stats.iqm([[1, 100], [2, 3], [4, 5], [6, 7]]) == 4.5  # pooled over tasks: 1..7 and 100, mean(3, 4, 5, 6)
    with pytest.raises(ValueError, match="finite"):
        stats.iqm([1.0, float("nan")])


def test_the_bootstrap_of_equal_runs_is_a_point_and_is_repeatable():
    assert stats.bootstrap_ci([5.0, 5.0, 5.0, 5.0]) == (5.0, 5.0)
    scores = np.arange(10.0)
    assert stats.bootstrap_ci(scores, seed=3) == stats.bootstrap_ci(scores, seed=3)
    low, high = stats.bootstrap_ci(scores, statistic=np.mean, repetitions=4000)
    # The mean of 10 draws from 0..9 (std 2.87): its bootstrap 95 % interval is about 4.5 -+ 1.96 * 2.87 / sqrt(10).
    assert low == pytest.approx(4.5 - 1.78, abs=0.25) and high == pytest.approx(4.5 + 1.78, abs=0.25)


def test_the_bootstrap_resamples_within_each_task():
    # Task 0's runs are all 0, task 1's all 10: every stratified resample keeps 3 of each, so the mean is 5 always
    # (resampling the 6 runs pooled would move it).
    scores = np.array([[0.0, 10.0]] * 3)
    assert stats.bootstrap_ci(scores, statistic=np.mean) == (5.0, 5.0)


def test_iqm_with_ci_text_and_the_performance_profile():
    assert stats.iqm_with_ci([7.25]) == "7.2"
    assert stats.iqm_with_ci([1, 2, 3, 4, 100]).startswith("3.0 [")
    assert stats.performance_profile([0.1, 0.5, 0.9, 1.0], [0.0, 0.5, 0.95]) == [1.0, 0.5, 0.25]


def test_a_profile_weighs_every_task_the_same():
    # Task 0 (4 runs): above 0, 0.5, 0.95: 4/4, 2/4, 1/4; task 1 (1 run, 2.0): 1, 1, 1. Pooling the 5 runs would
    # give 5/5, 3/5, 2/5; averaging the tasks gives (1 + 1) / 2, (0.5 + 1) / 2, (0.25 + 1) / 2.
    assert stats.performance_profile([[0.1, 0.5, 0.9, 1.0], [2.0]], [0.0, 0.5, 0.95]) == [1.0, 0.75, 0.625]
    with pytest.raises(ValueError, match="finite"):
        stats.performance_profile([[0.1, float("nan")]], [0.5])
    with pytest.raises(ValueError, match="finite"):
        stats.performance_profile([[0.1], []], [0.5])


def test_the_profile_interval_resamples_within_each_task():
    # Every run of task 0 is below 0.5 and every run of task 1 above it: each resample keeps that, so the fraction
    # above 0.5 is (0 + 1) / 2 in every resample, and the interval a point.
    assert stats.profile_ci([[0.2, 0.3, 0.1], [0.8, 0.9]], [0.5]) == [(0.5, 0.5)]
    # One task of runs 0 and 1: a resample of 2 draws holds the 1 twice (1/4), once (1/2) or never (1/4), so the
    # fraction above 0.5 is 1, 0.5 or 0: the 95 % interval spans 0 to 1; above 1.5 it is 0 in every resample.
    assert stats.profile_ci([[0.0, 1.0]], [0.5, 1.5], repetitions=4000) == [(0.0, 1.0), (0.0, 0.0)]


def test_training_rate_is_the_env_steps_over_the_seconds_of_every_interval_not_the_mean_of_the_rates():
    # 10000 random steps at 5000/s (2 s), then 20000 training steps at 250/s (80 s), then 20000 at 200/s (100 s):
    # 50000 steps in 182 s = 274.7/s. The mean of the three rates would say 1816.7/s.
    records = [{"env_step": 10000, "env_steps_per_s": 5000.0}, {"env_step": 30000, "env_steps_per_s": 250.0},
               {"env_step": 50000, "env_steps_per_s": 200.0}]
    assert stats.training_rate(records) == 275


def test_training_rate_skips_a_record_at_the_step_of_the_one_before_and_is_0_without_records():
    # The second record covers no steps (its rate is 0): 1000 steps in 4 s + 3000 in 6 s = 400/s.
    records = [{"env_step": 1000, "env_steps_per_s": 250.0}, {"env_step": 1000, "env_steps_per_s": 0.0},
               {"env_step": 4000, "env_steps_per_s": 500.0}]
    assert stats.training_rate(records) == 400
    assert stats.training_rate([]) == 0
