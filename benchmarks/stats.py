"""Statistics for comparing libraries or presets over seeds: the interquartile mean (IQM) and a stratified
bootstrap confidence interval, the recipe of rliable (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical
Precipice"), written out in NumPy for the two statistics used here.

    iqm(scores)                    the mean of the middle half of the sorted scores (scipy's trim_mean at 0.25:
                                   int(n / 4) scores cut at each end)
    bootstrap_ci(scores, ...)      scores [runs] or [runs, tasks]; each of `repetitions` resamples draws runs with
                                   replacement within every task (stratified by task), and the CI is the
                                   (alpha/2, 1 - alpha/2) percentiles of the statistic over the resamples
    performance_profile(...)       the fraction of runs whose normalized score exceeds each threshold
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
    low, high = np.percentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(low), float(high)


def iqm_with_ci(scores, digits: int = 1, seed: int = 0) -> str:
    """"IQM [low, high]" (95 % stratified bootstrap), or the score alone for one run."""
    flat = np.asarray(scores, np.float64).reshape(-1)
    if len(flat) == 1:
        return f"{flat[0]:.{digits}f}"
    low, high = bootstrap_ci(scores, seed=seed)
    return f"{iqm(scores):.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def performance_profile(normalized: Sequence[float], thresholds: Sequence[float]) -> list[float]:
    """For each threshold tau, the fraction of runs (all tasks pooled) whose normalized score is above tau."""
    scores = np.asarray(normalized, np.float64).reshape(-1)
    return [float(np.mean(scores > tau)) for tau in thresholds]
