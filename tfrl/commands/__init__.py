"""The `tfrl` command: one program with a subcommand per job (also `python -m tfrl`).

    tfrl train --agent=dqn --env=LunarLander-v2
    tfrl evaluate --run_dir=runs/... --episodes=20
    tfrl export --run_dir=runs/... --model_name=lunar
    tfrl serve --model_name=lunar --model_base_path=saved_models/lunar     (also installed as tfrl-serve)
    tfrl doctor
    tfrl plot --runs=runs/dqn-* --out=curve.png
    tfrl tune --agent=ppo --env=CartPole-v1 --trials=20 --out_preset=best.json

Each subcommand is a module with its own absl flags and a `run()`; only the chosen one is imported, so its
flags are the only ones defined. scripts/*.py in a checkout call the same modules.
"""

from __future__ import annotations

import difflib
import importlib
import sys

COMMANDS = {
    "train": ("tfrl.commands.train", "train an agent (presets, checkpoints, resume, export)"),
    "evaluate": ("tfrl.commands.evaluate", "run a trained policy for N episodes, optionally record a video"),
    "export": ("tfrl.commands.export", "export a run's policy as a SavedModel in TF Serving's layout"),
    "serve": ("tfrl.commands.serve", "serve SavedModels over TensorFlow Serving's REST API"),
    "doctor": ("tfrl.commands.doctor", "check this machine's TensorFlow install and hardware"),
    "plot": ("tfrl.commands.plot", "plot learning curves of runs as a PNG"),
    "tune": ("tfrl.commands.tune", "search hyperparameters with Optuna; write the best as a preset"),
}


def usage() -> str:
    lines = ["usage: tfrl <command> [flags]   (tfrl <command> --help lists a command's flags)", "", "commands:"]
    lines += [f"  {name:<9} {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """The `tfrl` console script: runs `tfrl <command> [flags]`."""
    argv = list(sys.argv if argv is None else argv)
    if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
        print(usage())
        sys.exit(0 if len(argv) >= 2 else 2)
    name = argv[1]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; commands: {', '.join(COMMANDS)}"
        print(f"tfrl: error: unknown command {name!r}{hint}", file=sys.stderr)
        sys.exit(2)
    sys.argv = [f"tfrl {name}", *argv[2:]]  # the subcommand's flags, and its name in messages
    importlib.import_module(COMMANDS[name][0]).run()
