"""Train an agent: python scripts/train.py --agent=dqn --env=LunarLander-v2

The tuned preset for (agent, env) in configs/ is picked automatically; --hp
key=value overrides any hyperparameter. Hardware flags (--device, --mixed_precision,
--xla, ...) are applied once, before any TF op. Bad input exits with code 2
before anything is written.

Crash recovery: the run checkpoints every `checkpoint_interval` env steps. Run the
same command again with the same --run_dir (or `--resume --run_dir=DIR`, which
takes everything from DIR/config.json) and it continues from the newest
checkpoint; a --run_dir that holds a run with a different config is an error.
At the end the greedy policy is exported as a SavedModel (tfrl.export): the last one, or with
--hp=keep_best_policy=true the one of the best periodic evaluation (tfrl.best_policy).

--strategy=multi_worker (docs/distributed.md): run the same command on every worker, each with its own
TF_CONFIG. Only the chief writes --run_dir (config, metrics, TensorBoard, checkpoints, export); the other
workers checkpoint into a temporary directory that is deleted at the end, and write nothing else. Each
worker prints the SHA-256 of its final checkpoint's variables: equal digests = workers in sync.

SIGTERM or Ctrl-C (SIGINT) stops training gracefully: a checkpoint at the current
env step, then exit code 0 without the final evaluation and export; the same
command resumes. A second Ctrl-C stops at once (KeyboardInterrupt).
A NaN or Inf in training stops it with exit code 3 and writes nothing over the
newest checkpoint (tfrl.numerics). See docs/reliability.md.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import tempfile

from absl import flags, logging

from tfrl import agents, cli, config as config_lib, distribute, envs, runs, runtime as runtime_lib, shutdown
from tfrl.errors import UsageError
from tfrl.lazy_import import LazyModule

# TensorFlow loads after the flags are checked: bad input is reported in well under a second.
checkpoints = LazyModule("tfrl.checkpoints")
keras = LazyModule("keras")
training_loop = LazyModule("tfrl.training_loop")

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
flags.DEFINE_string("run_dir", None, "Where config, metrics, TensorBoard logs, checkpoints and the export go; default "
                    "runs/<agent>-<env>-s<seed>-<time>. If it holds a run with the same config, that run is resumed "
                    "from its newest checkpoint (started over if it has none); a different config is an error.")
flags.DEFINE_boolean("resume", False, "Continue the run in --run_dir from its newest checkpoint, with the agent, env, seed, "
                     "hyperparameters and hardware flags of its config.json; flags given as well must agree with it.")
flags.DEFINE_string("export_base_path", None, "Export the greedy policy at the end to <this>/<model_name>/<version>/ "
                    "(TF Serving layout); default <run_dir>/saved_models; empty = no export.")
flags.DEFINE_string("model_name", None, "Model name of the export; default <agent>-<env id>.")
flags.DEFINE_integer("keep_checkpoints", 3, "Newest checkpoints kept in <run_dir>/checkpoints/; 0 keeps every one "
                     "(e.g. to evaluate each afterwards: benchmarks/checkpoint_curve.py).")
flags.DEFINE_string("config_dir", str(REPO_ROOT / "configs"), "Directory of preset JSON files.")
runtime_lib.define_flags()

FLAGS = flags.FLAGS


def resolve_config(agent_name: str, env_arg: str, base_config=None):
    """(agent entry, env id, preset name, config) from the flags; raises UsageError, writes nothing.

    base_config (--resume: the saved run's config) replaces the preset lookup; --hp still applies on top.
    """
    entry = agents.get(agent_name)
    env_id = envs.resolve_env_id(env_arg)
    if base_config is not None:
        config, preset_name = base_config, None
    else:
        preset = config_lib.find_preset(pathlib.Path(FLAGS.config_dir), agent_name, env_arg, FLAGS.preset)
        if preset is None and FLAGS.preset == "auto":
            preset = config_lib.find_preset(pathlib.Path(FLAGS.config_dir), agent_name, env_id, FLAGS.preset)
        config = entry.config_cls()
        if preset is not None:
            config = config_lib.apply_overrides(config, preset.hparams, f"preset {preset.name}")
        preset_name = preset.name if preset else None
    overrides = config_lib.parse_cli_overrides(FLAGS.hp)
    if FLAGS.num_envs is not None:
        if FLAGS.num_envs < 1:
            raise UsageError(f"--num_envs must be >= 1, got {FLAGS.num_envs}")
        if "num_envs" in overrides:
            raise UsageError("--num_envs and --hp=num_envs both given")
        overrides["num_envs"] = str(FLAGS.num_envs)
    config = config_lib.apply_overrides(config, overrides, "--hp")
    return entry, env_id, preset_name, config


def saved_run(run_dir: pathlib.Path | None) -> runs.RunRecord | None:
    """The run already in --run_dir, or None if it is new or empty; UsageError if it holds something else."""
    if run_dir is None or not run_dir.exists() or not any(run_dir.iterdir()):
        return None
    if not (run_dir / runs.CONFIG_FILE).exists():
        raise UsageError(f"--run_dir {run_dir} is not empty and holds no tfrl run (no {runs.CONFIG_FILE}); "
                         "pick a new one")
    return runs.read_config(run_dir)


def take_saved_flags(saved: runs.RunRecord) -> None:
    """--resume: every flag not given on the command line takes the run's saved value."""
    for name, value in saved.launcher_flags().items():
        if name in FLAGS and not FLAGS[name].present:
            FLAGS[name].value = value


def prepare_run_dir(agent_name: str, env_id: str) -> pathlib.Path:
    if FLAGS.run_dir:
        run_dir = pathlib.Path(FLAGS.run_dir)
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = REPO_ROOT / "runs" / f"{agent_name}-{env_id}-s{FLAGS.seed}-{stamp}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--run_dir: cannot create {run_dir}: {e.strerror}") from None
    return run_dir


def is_chief() -> bool:
    """False on the non-chief workers of --strategy=multi_worker: they write nothing in --run_dir."""
    return FLAGS.strategy != "multi_worker" or distribute.parse_tf_config(os.environ.get("TF_CONFIG")).is_chief


def main(argv):
    cli.no_extra_args(argv)
    chief = is_chief()
    if FLAGS.strategy == "multi_worker" and FLAGS.resume:
        raise UsageError("--resume is not supported with --strategy=multi_worker: the other workers' replay and "
                         "env state are not checkpointed; start a new --run_dir")
    run_dir_arg = pathlib.Path(FLAGS.run_dir) if FLAGS.run_dir and chief else None
    saved = saved_run(run_dir_arg)
    if saved is not None and FLAGS.strategy == "multi_worker" and checkpoints.latest_checkpoint_number(run_dir_arg):
        raise UsageError(f"--run_dir {run_dir_arg} holds checkpoints, and a multi_worker run cannot resume; "
                         "use a new --run_dir")
    if FLAGS.resume:
        if run_dir_arg is None:
            raise UsageError("--resume needs --run_dir, the run to continue")
        if saved is None:
            raise UsageError(f"--resume: {run_dir_arg} holds no run to resume")
        if checkpoints.latest_checkpoint_number(run_dir_arg) is None:
            raise UsageError(f"--resume: {run_dir_arg} has no checkpoint to resume from")
        if FLAGS["preset"].present:
            raise UsageError("--resume takes the config from the run's config.json; drop --preset")
        take_saved_flags(saved)
        if FLAGS.strategy == "multi_worker":  # saved by a multi_worker run
            raise UsageError(f"--resume: {run_dir_arg} is a multi_worker run, and those cannot resume; "
                             "start a new --run_dir")
    if not FLAGS.agent or not FLAGS.env:
        raise UsageError("--agent and --env are required, e.g. --agent=dqn --env=LunarLander-v2")
    if FLAGS.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {FLAGS.seed}")  # NumPy and gymnasium refuse negative seeds
    if FLAGS.keep_checkpoints < 0:
        raise UsageError(f"--keep_checkpoints must be >= 0 (0 keeps every checkpoint), got {FLAGS.keep_checkpoints}")
    if FLAGS.vector_mode not in envs.VECTOR_MODES:
        raise UsageError(f"--vector_mode: unknown mode {FLAGS.vector_mode!r}; choose one of {', '.join(envs.VECTOR_MODES)}")
    # --resume: the config as saved, even if the presets have changed since.
    entry, env_id, preset_name, config = resolve_config(FLAGS.agent, FLAGS.env,
                                                        base_config=saved.config if FLAGS.resume else None)
    if FLAGS.resume:
        preset_name = saved.preset
    runtime_options = runtime_lib.options_from_flags()
    runtime_lib.validate_options(runtime_options)  # the checks that need no TensorFlow, before it loads
    if run_dir_arg is not None:
        cli.check_output_dir("run_dir", run_dir_arg)
    if FLAGS.export_base_path:
        cli.check_output_dir("export_base_path", pathlib.Path(FLAGS.export_base_path))
    record = runs.RunRecord(agent=FLAGS.agent, env_id=env_id, seed=FLAGS.seed, config=config,
                            runtime=runtime_options, env_arg=FLAGS.env, preset=preset_name,
                            vector_mode=FLAGS.vector_mode, keep_checkpoints=FLAGS.keep_checkpoints)
    if saved is not None:
        differences = record.differences(saved)
        if differences:
            advice = ("drop the flags that differ" if FLAGS.resume
                      else "use a new --run_dir, or --resume to continue it as it was")
            raise UsageError(f"--run_dir {run_dir_arg} holds a run with a different config (requested != saved: "
                             f"{'; '.join(differences)}); {advice}")
    runtime = runtime_lib.apply(runtime_options)  # validates first; raises before anything is written
    training_loop.check_runtime(FLAGS.agent, config, runtime)
    # Python, NumPy and TF global seeds: network initialization (under multi_worker, the chief's initial
    # values are broadcast to every worker when the variables are created).
    keras.utils.set_random_seed(FLAGS.seed)
    if chief:
        run_dir = prepare_run_dir(FLAGS.agent, env_id)
        run_dir_lock = runs.lock_for_training(run_dir)  # noqa: F841 (held until the process ends)
    else:
        # The loop checkpoints as on the chief (TF's pattern for non-chief workers: a temporary directory);
        # TemporaryDirectory deletes it when main returns or raises.
        worker_dir = tempfile.TemporaryDirectory(prefix="tfrl-worker-")
        run_dir = pathlib.Path(worker_dir.name)

    if saved is None:
        runs.write_config(run_dir, record)
    for line in runtime.banner().splitlines():
        logging.info("%s", line)
    logging.info("agent=%s env=%s preset=%s seed=%d run_dir=%s", FLAGS.agent, env_id, preset_name, FLAGS.seed, run_dir)
    if saved is not None:
        number = checkpoints.latest_checkpoint_number(run_dir)
        logging.info("%s holds this run already: %s", run_dir,
                     f"resuming from its newest loadable checkpoint (newest: {number})" if number
                     else "no checkpoint yet, starting over")
    stop = shutdown.StopRequest.on_signals()
    # Each worker its own env, exploration and replay seeds; the chief's are --seed.
    options = training_loop.LoopOptions(vector_mode=FLAGS.vector_mode, stop_requested=stop.requested,
                                        keep_checkpoints=FLAGS.keep_checkpoints or None)
    result = training_loop.train(FLAGS.agent, config, env_id, runtime.worker_seed(FLAGS.seed), runtime, run_dir,
                                 options)
    if result["kind"] == "stopped":
        print(f"stopped by {stop.signal_name} at env step {result['env_step']}: checkpoint {result['checkpoint']} "
              f"saved; run the same command (or --resume --run_dir={run_dir}) to continue", flush=True)
        return
    print(f"final evaluation: env={env_id} episodes={result['episodes']} "
          f"return={result['return_mean']:.2f} +/- {result['return_std']:.2f} "
          f"env_steps={result['env_step']} wall_time_s={result['wall_time_s']:.1f} "
          f"run_dir={run_dir if chief else 'none (not the chief)'}", flush=True)
    if runtime.cluster.num_workers > 1:
        number = checkpoints.latest_checkpoint_number(run_dir)
        prefix = run_dir / checkpoints.CHECKPOINT_DIR / f"ckpt-{number}"
        print(f"final checkpoint: task={runtime.cluster.task} variables_sha256={distribute.checkpoint_digest(prefix)}",
              flush=True)
    best_record = result.get("best")  # keep_best_policy runs (tfrl.best_policy)
    if best_record is not None:
        selected = best_record["best_eval_return_mean"]  # None only if someone edited the best policy's JSON
        print(f"best policy: env step {best_record['best_env_step']} (periodic evaluation "
              f"{'unknown' if selected is None else f'{selected:.2f}'}): "
              f"return={best_record['return_mean']:.2f} +/- {best_record['return_std']:.2f} "
              f"over the final evaluation's {best_record['episodes']} episodes", flush=True)
    if chief:
        export_final_policy(run_dir, FLAGS.agent, env_id, export_best=best_record is not None)


def export_final_policy(run_dir: pathlib.Path, agent_name: str, env_id: str, export_best: bool) -> None:
    if FLAGS.export_base_path == "":
        return
    base_path = pathlib.Path(FLAGS.export_base_path) if FLAGS.export_base_path else run_dir / "saved_models"
    version_dir = runs.export_run(run_dir, base_path, FLAGS.model_name or f"{agent_name}-{env_id}", best=export_best)
    print(f"exported: {version_dir}{' (the best policy)' if export_best else ''}", flush=True)


def run():
    cli.run(main)


if __name__ == "__main__":
    run()
