"""Train an agent: python scripts/train.py --agent=dqn --env=LunarLander-v2

The tuned preset for (agent, env) in configs/ is picked automatically; --hp
key=value overrides any hyperparameter. Hardware flags (--device, --mixed_precision,
--xla, ...) are applied once, before any TF op. Bad input exits with code 2
before anything is written.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import sys

from absl import app, flags, logging

import tfrl
from tfrl import agents, config as config_lib, envs, runtime as runtime_lib
from tfrl.errors import UsageError

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

flags.DEFINE_string("agent", None, f"Agent to train: {', '.join(agents.AGENT_NAMES)}.")
flags.DEFINE_string("env", None, "Gymnasium environment id, e.g. LunarLander-v2 or CartPole-v1.")
flags.DEFINE_integer("seed", 0, "Seed of environments, network initialization, exploration and replay sampling.")
flags.DEFINE_string("preset", "auto", "Preset name in --config_dir (file stem); 'auto' picks the one for --agent/--env; "
                    "'none' uses the config class defaults.")
flags.DEFINE_multi_string("hp", [], "Hyperparameter override key=value, repeatable: --hp=learning_rate=1e-3 "
                          "--hp=hidden_sizes=64,64.")
flags.DEFINE_integer("num_envs", None, "Parallel environments (overrides the preset's num_envs).")
flags.DEFINE_string("vector_mode", "sync", "Vector env: sync (one process) or async (a process per env).")
flags.DEFINE_string("run_dir", None, "Where config, metrics and TensorBoard logs go; default runs/<agent>-<env>-s<seed>-<time>. "
                    "Must not exist or be empty.")
flags.DEFINE_string("config_dir", str(REPO_ROOT / "configs"), "Directory of preset JSON files.")
runtime_lib.define_flags()

FLAGS = flags.FLAGS


def resolve_config(agent_name: str, env_arg: str):
    """(agent entry, env id, preset, config) from the flags; raises UsageError, writes nothing."""
    entry = agents.get(agent_name)
    env_id = envs.resolve_env_id(env_arg)
    preset = config_lib.find_preset(pathlib.Path(FLAGS.config_dir), agent_name, env_arg, FLAGS.preset)
    if preset is None and FLAGS.preset == "auto":
        preset = config_lib.find_preset(pathlib.Path(FLAGS.config_dir), agent_name, env_id, FLAGS.preset)
    config = entry.config_cls()
    if preset is not None:
        config = config_lib.apply_overrides(config, preset.hparams, f"preset {preset.name}")
    overrides = config_lib.parse_cli_overrides(FLAGS.hp)
    if FLAGS.num_envs is not None:
        if "num_envs" in overrides:
            raise UsageError("--num_envs and --hp=num_envs both given")
        overrides["num_envs"] = str(FLAGS.num_envs)
    config = config_lib.apply_overrides(config, overrides, "--hp")
    return entry, env_id, preset, config


def prepare_run_dir(agent_name: str, env_id: str) -> pathlib.Path:
    if FLAGS.run_dir:
        run_dir = pathlib.Path(FLAGS.run_dir)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise UsageError(f"--run_dir {run_dir} exists and is not empty; pick a new one")
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = REPO_ROOT / "runs" / f"{agent_name}-{env_id}-s{FLAGS.seed}-{stamp}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--run_dir: cannot create {run_dir}: {e.strerror}") from None
    return run_dir


def main(argv):
    if len(argv) > 1:
        raise UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS.agent or not FLAGS.env:
        raise UsageError("--agent and --env are required, e.g. --agent=dqn --env=LunarLander-v2")
    if FLAGS.vector_mode not in envs.VECTOR_MODES:
        raise UsageError(f"--vector_mode: unknown mode {FLAGS.vector_mode!r}; choose one of {', '.join(envs.VECTOR_MODES)}")
    entry, env_id, preset, config = resolve_config(FLAGS.agent, FLAGS.env)
    runtime_options = runtime_lib.options_from_flags()
    runtime = runtime_lib.apply(runtime_options)  # validates first; raises before anything is written
    run_dir = prepare_run_dir(FLAGS.agent, env_id)

    resolved = {
        "tfrl_version": tfrl.__version__,
        "agent": FLAGS.agent, "env_id": env_id, "env_arg": FLAGS.env, "seed": FLAGS.seed,
        "preset": preset.name if preset else None, "vector_mode": FLAGS.vector_mode,
        "hparams": config_lib.to_dict(config), "runtime": runtime_options.__dict__,
    }
    (run_dir / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")
    for line in runtime.banner().splitlines():
        logging.info("%s", line)
    logging.info("agent=%s env=%s preset=%s seed=%d run_dir=%s", FLAGS.agent, env_id,
                 resolved["preset"], FLAGS.seed, run_dir)
    result = entry.train(config, env_id, FLAGS.seed, runtime, run_dir, vector_mode=FLAGS.vector_mode)
    print(f"final evaluation: env={env_id} episodes={result['episodes']} "
          f"return={result['return_mean']:.2f} +/- {result['return_std']:.2f} "
          f"env_steps={result['env_step']} wall_time_s={result['wall_time_s']:.1f} run_dir={run_dir}", flush=True)


def _parse_flags_or_exit(argv):
    """absl exits with code 1 on a bad flag; our contract is one clear line and exit code 2."""
    try:
        return FLAGS(argv)
    except flags.Error as e:
        print(f"{pathlib.Path(argv[0]).name}: error: {e}", file=sys.stderr)
        sys.exit(2)


def run():
    try:
        app.run(main, flags_parser=_parse_flags_or_exit)
    except UsageError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    run()
