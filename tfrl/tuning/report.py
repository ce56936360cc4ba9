"""What a study found: the best trials, the parameters that mattered, the history plot, the best trial as a preset."""

from __future__ import annotations

import json
import os
import pathlib
import warnings
from typing import Any

from tfrl import config as config_lib, presets
from tfrl.lazy_import import LazyModule

optuna = LazyModule("optuna")

MIN_TRIALS_FOR_IMPORTANCE = 5  # complete trials; below that the importances are noise
BEST_SHOWN = 5


def complete_trials(study) -> list:
    """The complete trials, best first."""
    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return sorted(trials, key=lambda trial: trial.value, reverse=True)


def summary(study, url: str) -> list[str]:
    """The report's lines: trial counts, the best trials, the importances."""
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name.lower()] = counts.get(trial.state.name.lower(), 0) + 1
    objective = study.user_attrs.get("objective", "return")
    total = sum(counts.values())
    lines = [f"study {study.study_name} ({url}): {total} trial{'s' * (total != 1)}: "
             + ", ".join(f"{number} {state}" for state, number in sorted(counts.items()))]
    best = complete_trials(study)[:BEST_SHOWN]
    if best:
        lines.append(f"best trials ({objective}, higher is better):")
        for trial in best:
            seconds = trial.duration.total_seconds() if trial.duration else float("nan")
            params = " ".join(f"{name}={short(value)}" for name, value in trial.params.items())
            lines.append(f"  trial {trial.number:>4}  {trial.value:10.3f}  {seconds:7.1f} s  {params}")
    lines.append(importance_line(study))
    return lines


def importance_line(study) -> str:
    complete = len(complete_trials(study))
    if complete < MIN_TRIALS_FOR_IMPORTANCE:
        return (f"parameter importances: {complete} complete trial{'s' * (complete != 1)}, too few (they need "
                f"{MIN_TRIALS_FOR_IMPORTANCE})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importances = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError) as e:  # e.g. no parameter varied among the complete trials
        return f"parameter importances: not computed ({e})"
    return "parameter importances (optuna.importance): " + ", ".join(
        f"{name} {value:.2f}" for name, value in importances.items())


def plot_history(study, path: pathlib.Path) -> str:
    """The optimization history as a PNG at `path` (matplotlib, the plot extra); the line saying what happened."""
    if not complete_trials(study):
        return "optimization history: not plotted (no complete trial)"
    try:
        import matplotlib
    except ImportError:
        return "optimization history: not plotted (needs matplotlib: pip install 'tfrl[plot]')"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        axes = optuna.visualization.matplotlib.plot_optimization_history(study)
    axes.set_title(f"{study.study_name}: optimization history")
    figure = axes.figure
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, bbox_inches="tight")  # the legend sits outside the axes
    plt.close(figure)
    return f"optimization history: {path}"


def best_preset(study, url: str, config_cls: type, config_dir: pathlib.Path | None) -> dict[str, Any] | None:
    """The best complete trial as a preset (tfrl.presets' format): the base preset's hyperparameters, the fixed
    ones and the trial's, valued as the trial's config holds them. None if no trial is complete."""
    best = complete_trials(study)
    if not best:
        return None
    trial, attrs = best[0], study.user_attrs
    base = presets.find(attrs["agent"], [attrs["env"], *attrs.get("env_ids", [])], attrs["preset"],
                        presets.search_dirs(config_dir))
    layers = [(base.hparams if base else {}, f"preset {attrs['preset']}"), (attrs["fixed_hp"], "--hp"),
              (trial.params, f"trial {trial.number}")]
    config, keys = config_cls(), []
    for values, source in layers:
        config = config_lib.apply_overrides(config, values, source)
        keys += [config_lib.field_name(config_cls, key, source) for key in values]
    resolved = config_lib.to_dict(config)
    finished = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                            optuna.trial.TrialState.PRUNED)))
    seeds = attrs.get("seeds", 1)
    description = (f"{attrs['agent'].upper()} for {attrs['env']}, found by tfrl tune: study {study.study_name} ({url}), "
                   f"trial {trial.number} of {finished} finished, {attrs.get('objective', 'return')} "
                   f"{trial.value:.3f} (the final greedy evaluation, mean over {seeds} seed{'s' * (seeds > 1)}); "
                   f"starting from preset {attrs['preset']}"
                   + (f", fixed {_fixed_text(attrs['fixed_hp'])}" if attrs["fixed_hp"] else "") + ".")
    preset = {"agent": attrs["agent"], "env_ids": list(dict.fromkeys([attrs["env"], *attrs.get("env_ids", [])])),
              "description": description, "hparams": {key: resolved[key] for key in dict.fromkeys(keys)}}
    if base is not None and base.runtime:
        preset["runtime"] = dict(base.runtime)
    return preset


def write_preset(preset: dict[str, Any], path: pathlib.Path) -> None:
    """The preset as JSON at `path`, whole or not at all (written beside it, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(preset, indent=2) + "\n")
    os.replace(partial, path)


def short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _fixed_text(fixed: dict[str, Any]) -> str:
    return " ".join(f"{key}={value}" for key, value in fixed.items())
