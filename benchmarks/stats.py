"""Statistics for comparing libraries or presets over seeds: the interquartile mean (IQM) and a stratified
bootstrap confidence interval, the recipe of rliable (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical
Precipice"), written out in NumPy for the two statistics used here.

    iqm(scores)                    the mean of the middle half of the sorted scores (scipy's trim_mean at 0.25:
                                   int(n / 4) scores cut at each end)
    bootstrap_ci(scores, ...)      scores [runs] or [runs, tasks]; each of `repetitions` resamples draws runs with
                                   replacement within every task (stratified by task), and the CI is the
                                   (alpha/2, 1 - alpha/2) percentiles of the statistic over the resamples
    performance_profile(...)       the fraction of runs whose normalized score exceeds each threshold, averaged
                                   over tasks
    profile_ci(...)                its stratified bootstrap interval at each threshold
    training_rate(train_records)   a run's env steps per second from its train records (each covering the steps
                                   since the one before): the steps over the seconds, not the mean of the rates
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def iqm(scores) -> float:
    """Interquartile mean over all scores (every run of every task): int(n / 4) cut at each end, then the mean."""
    values = np.sort(np.asarray(scores, np.float64).reshape(-1))
    if not len(values) or not np.all(np.isfinite(values)):
        raise ValueError(f"iqm needs finite scores, got {values.tolist()}")
    cut = len(values) // 4
    return float(values[cut:len(values) - cut].mean())


def bootstrap_ci(scores, statistic: Callable[[np.ndarray], float] = iqm, repetitions: int = 2000,
                 alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """(low, high): the stratified bootstrap percentile interval of statistic(scores) at level 1 - alpha."""
    scores = np.asarray(scores, np.float64)
    scores = scores[:, None] if scores.ndim == 1 else scores  # [runs, tasks]
    rng = np.random.default_rng(seed)
    runs, tasks = scores.shape
    values = np.empty(repetitions)
    for k in range(repetitions):
        picks = rng.integers(0, runs, size=(runs, tasks))  # runs drawn within each task
        values[k] = statistic(np.take_along_axis(scores, picks, axis=0))
    low, high = _percentile_interval(values, alpha)
    return float(low), float(high)


def _percentile_interval(values: np.ndarray, alpha: float) -> np.ndarray:
    """[low, high] of the resampled statistic (axis 0: the resamples): its alpha/2 and 1 - alpha/2 percentiles."""
    return np.percentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)], axis=0)


def iqm_with_ci(scores, digits: int = 1, seed: int = 0) -> str:
    """"IQM [low, high]" (95 % stratified bootstrap), or the score alone for one run."""
    flat = np.asarray(scores, np.float64).reshape(-1)
    if len(flat) == 1:
        return f"{flat[0]:.{digits}f}"
    low, high = bootstrap_ci(scores, seed=seed)
    return f"{iqm(scores):.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _tasks(task_scores) -> list[np.ndarray]:
    """Per-task score arrays: a flat sequence is one task; tasks may hold different numbers of runs."""
    if len(task_scores) and np.ndim(task_scores[0]) == 0:
        task_scores = [task_scores]
    tasks = [np.asarray(scores, np.float64).reshape(-1) for scores in task_scores]
    if not tasks or any(not len(scores) or not np.all(np.isfinite(scores)) for scores in tasks):
        raise ValueError("a performance profile needs finite scores for every task")
    return tasks


def performance_profile(task_scores, thresholds: Sequence[float]) -> list[float]:
    """For each threshold tau, the fraction of runs whose normalized score is above tau, averaged over tasks (each
    task weighs the same, whatever its number of runs). task_scores: one sequence of runs per task, or one flat
    sequence for a single task."""
    taus = np.asarray(thresholds, np.float64)
    fractions = [np.mean(scores[:, None] > taus[None, :], axis=0) for scores in _tasks(task_scores)]
    return [float(value) for value in np.mean(fractions, axis=0)]


def profile_ci(task_scores, thresholds: Sequence[float], repetitions: int = 2000, alpha: float = 0.05,
               seed: int = 0) -> list[tuple[float, float]]:
    """(low, high) of performance_profile at each threshold: the stratified bootstrap percentile interval, each
    resample drawing every task's runs with replacement from that task's own runs."""
    tasks = _tasks(task_scores)
    rng = np.random.default_rng(seed)
    values = np.empty((repetitions, len(thresholds)))
    for k in range(repetitions):
        resample = [scores[rng.integers(0, len(scores), size=len(scores))] for scores in tasks]
        values[k] = performance_profile(resample, thresholds)
    low, high = _percentile_interval(values, alpha)
    return [(float(lo), float(hi)) for lo, hi in zip(low, high)]


def training_rate(train_records: list[dict]) -> int:
    """Env steps per second over the run's timed part: the logged intervals' env steps over their seconds.

    Each train record's rate covers the env steps since the record before it (the first: since step 0), and
    evaluations and checkpoints are not timed. The mean of the records' rates would count an interval of
    random actions before learning starts, many times faster, as much as an interval of training."""
    steps, seconds, previous = 0, 0.0, 0
    for record in train_records:
        interval, previous = record["env_step"] - previous, record["env_step"]
        if interval > 0:  # a record at the step of the one before covers no steps (its rate is 0)
            steps, seconds = steps + interval, seconds + interval / record["env_steps_per_s"]
    return round(steps / seconds) if seconds > 0 else 0
