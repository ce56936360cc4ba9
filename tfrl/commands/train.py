"""Train an agent: tfrl train --agent=dqn --env=LunarLander-v2   (or python scripts/train.py ... in a checkout)

The tuned preset for (agent, env) is picked automatically (--preset=NAME or a JSON file's path picks another,
--preset=none the defaults, --config_dir adds a folder of your own presets); --hp=key=value overrides any
hyperparameter, and --agent=dqn --hp=help lists them all. --env takes a gymnasium id, or "module:Id" to import
the module that registers it; --env_kwargs=key=value reaches gymnasium.make. The hardware flags (--device,
--mixed_precision, --xla, --strategy, ...) are applied once, before any TF op. Bad input exits with code 2
before anything is written. The same run from Python: tfrl.train (tfrl/api.py).

Crash recovery: the run checkpoints every `checkpoint_interval` env steps. Run the same command again and it
continues the interrupted run from its newest checkpoint, saying so (--new_run starts a new one); with
--run_dir, the run in that directory (`--resume --run_dir=DIR` takes everything from DIR/config.json). A
--run_dir that holds a run with a different config is an error; one whose run is complete is left as it is,
unless --hp=total_env_steps asks for more: then it trains on and exports again. --init_from=RUN_DIR|SAVED_MODEL
starts a new run from another run's weights. At the end the greedy policy is exported as a SavedModel
(tfrl.models.export): the last one, or with --hp=keep_best_policy=true the one of the best periodic evaluation.

--strategy=multi_worker (docs/distributed.md): run the same command on every worker, each with its own
TF_CONFIG. Only the chief writes --run_dir; each worker prints the SHA-256 of its final checkpoint's
variables: equal digests = workers in sync.

SIGTERM or Ctrl-C (SIGINT) stops training gracefully: a checkpoint at the current env step, then exit code 0
without the final evaluation and export, and the command that resumes. A second Ctrl-C stops at once.
A NaN or Inf in training stops it with exit code 3 and writes nothing over the newest checkpoint.
See docs/reliability.md.
"""

from __future__ import annotations

import difflib
import pathlib
import sys

from absl import flags

from tfrl import agents, cli, config as config_lib, envs, presets
from tfrl.commands import runtime_flags
from tfrl.errors import UsageError
from tfrl.run import launch, shutdown

flags.DEFINE_string("agent", None, f"Agent to train: {', '.join(agents.AGENT_NAMES)}.")
flags.DEFINE_string("env", None, "Gymnasium environment id, e.g. LunarLander-v2 or CartPole-v1; module:Id imports "
                    "the module (which registers Id) first.")
flags.DEFINE_multi_string("env_kwargs", [], "Keyword argument of gymnasium.make, key=value, repeatable: "
                          "--env_kwargs=is_slippery=false (true/false, numbers and none are typed).")
flags.DEFINE_integer("seed", 0, "Seed of environments, network initialization, exploration and replay sampling.")
flags.DEFINE_string("preset", "auto", "Preset name in --config_dir (file stem), or a preset file's path; 'auto' "
                    "picks the one for --agent/--env; 'none' uses the config class defaults.")
flags.DEFINE_multi_string("hp", [], "Hyperparameter override key=value, repeatable: --hp=learning_rate=1e-3 "
                          "--hp=hidden_sizes=64,64. --hp=help lists every hyperparameter of --agent.")
flags.DEFINE_integer("num_envs", None, "Parallel environments (overrides the preset's num_envs).")
flags.DEFINE_string("vector_mode", "sync", "Vector env: sync (one process), async (a process per env) or envpool "
                    "(EnvPool's C++ envs, for the ids it has: pip install 'tfrl[envpool]').")
flags.DEFINE_string("run_dir", None, "Where config, metrics, TensorBoard logs, checkpoints and the export go; default: "
                    "the interrupted run of the same command under runs/, else a new runs/<agent>-<env>-s<seed>-<time>. "
                    "If it holds a run with the same config, that run is resumed from its newest checkpoint (started "
                    "over if it has none); a different config is an error.")
flags.DEFINE_boolean("new_run", False, "Without --run_dir: start a new run even if an interrupted run of the same "
                     "command exists under runs/.")
flags.DEFINE_boolean("resume", False, "Continue the run in --run_dir from its newest checkpoint, with the agent, env, "
                     "seed, hyperparameters and hardware flags of its config.json; flags given as well must agree, "
                     "except --hp=total_env_steps, which extends the run (also a complete one).")
flags.DEFINE_string("init_from", None, "Start a new run from the weights of another run (a run directory: all its "
                    "networks) or of an export (a SavedModel: its policy network); same agent, spaces and networks.")
flags.DEFINE_string("export_base_path", None, "Export the greedy policy at the end to <this>/<model_name>/<version>/ "
                    "(TF Serving layout); default <run_dir>/saved_models; empty = no export.")
flags.DEFINE_string("model_name", None, "Model name of the export; default <agent>-<env id>.")
flags.DEFINE_integer("keep_checkpoints", 3, "Newest checkpoints kept in <run_dir>/checkpoints/; 0 keeps every one "
                     "(e.g. to evaluate each afterwards: benchmarks/checkpoint_curve.py).")
flags.DEFINE_integer("actors", 0, "Step the envs in this many Ray actors (pip install 'tfrl[ray]'), each with its "
                     "share of num_envs and a NumPy copy of the policy; 0 steps them in this process. "
                     "docs/distributed.md.")
flags.DEFINE_enum("actor_mode", "sync", ["sync", "async"], "With --actors: sync, every round acts with the "
                  "learner's newest weights; async (A2C, PPO), each update takes the rollouts that arrived first "
                  "while the actors go on stepping, corrected with V-trace.")
flags.DEFINE_integer("weight_sync_period", 1, "With --actors: updates between two refreshes of the actors' "
                     "weights (async A2C and PPO; DQN, SAC, TD3).")
flags.DEFINE_string("ray_address", None, "The Ray cluster of --actors: 'auto' (this machine is a node) or the head's "
                    "host:port; default: a local Ray started for the run.")
flags.DEFINE_string("config_dir", None, "A directory of your own preset JSON files, searched before the built-in "
                    "presets (a file named like a built-in one replaces it).")
runtime_flags.define_flags()

FLAGS = flags.FLAGS


def request_from_flags() -> launch.TrainRequest:
    """The TrainRequest the command line asks for; UsageError on flags that cannot form one."""
    if FLAGS.resume:
        take_saved_flags()
    hp = config_lib.parse_cli_overrides(FLAGS.hp)
    if FLAGS.num_envs is not None:
        if FLAGS.num_envs < 1:
            raise UsageError(f"--num_envs must be >= 1, got {FLAGS.num_envs}")
        if "num_envs" in hp:
            raise UsageError("--num_envs and --hp=num_envs both given")
        hp["num_envs"] = str(FLAGS.num_envs)
    env_kwargs = {key: config_lib.parse_value(value)
                  for key, value in config_lib.parse_cli_overrides(FLAGS.env_kwargs, "--env_kwargs").items()}
    export_base_path = pathlib.Path(FLAGS.export_base_path) if FLAGS.export_base_path else None
    return launch.TrainRequest(
        agent=FLAGS.agent, env=FLAGS.env, env_kwargs=env_kwargs, seed=FLAGS.seed, preset=FLAGS.preset, hp=hp,
        config_dir=pathlib.Path(FLAGS.config_dir) if FLAGS.config_dir else None,
        run_dir=pathlib.Path(FLAGS.run_dir) if FLAGS.run_dir else None, new_run=FLAGS.new_run,
        init_from=pathlib.Path(FLAGS.init_from) if FLAGS.init_from else None,
        resume=FLAGS.resume, runtime=runtime_flags.options_from_flags(),
        vector_mode=FLAGS.vector_mode, keep_checkpoints=FLAGS.keep_checkpoints,
        export_base_path=export_base_path, export=FLAGS.export_base_path != "", model_name=FLAGS.model_name,
        actors=FLAGS.actors, actor_mode=FLAGS.actor_mode, weight_sync_period=FLAGS.weight_sync_period,
        ray_address=FLAGS.ray_address)


def take_saved_flags() -> None:
    """--resume: every flag not given on the command line takes the value of the run in --run_dir."""
    from tfrl.run import runs

    if not FLAGS.run_dir:
        raise UsageError("--resume needs --run_dir, the run to continue")
    if FLAGS["preset"].present:
        raise UsageError("--resume takes the config from the run's config.json; drop --preset")
    if not (pathlib.Path(FLAGS.run_dir) / runs.CONFIG_FILE).exists():
        raise UsageError(f"--resume: {FLAGS.run_dir} holds no run to resume")
    saved = runs.read_config(pathlib.Path(FLAGS.run_dir))
    if saved.runtime.strategy == "multi_worker":
        raise UsageError(f"--resume: {FLAGS.run_dir} is a multi_worker run, and those cannot resume; "
                         "start a new --run_dir")
    for name, value in saved.launcher_flags().items():
        if name in FLAGS and not FLAGS[name].present:
            FLAGS[name].value = value
    if not FLAGS["env_kwargs"].present:
        FLAGS.env_kwargs = [f"{key}={value}" for key, value in saved.env_kwargs.items()]


def print_hparams() -> None:
    """--hp=help: every hyperparameter of --agent, with the value of the preset --env would pick."""
    if not FLAGS.agent:
        raise UsageError("--hp=help lists the hyperparameters of one agent: add --agent=" + "|".join(agents.AGENT_NAMES))
    spec = agents.get(FLAGS.agent)
    preset = None
    if FLAGS.env or FLAGS.preset not in ("auto", "none"):
        names = [FLAGS.env] + ([envs.resolve_env_id(FLAGS.env)] if FLAGS.env else [])
        dirs = presets.search_dirs(pathlib.Path(FLAGS.config_dir) if FLAGS.config_dir else None)
        preset = presets.find(FLAGS.agent, names, FLAGS.preset, dirs)
    print(config_lib.describe(spec.config_cls, preset))


def unknown_flag_hint(name: str) -> str:
    """For an unknown flag that is (or is close to) a hyperparameter's name: how to set it."""
    hparams = agents.hparam_names()
    close = [name] if name in hparams else difflib.get_close_matches(name, hparams, n=1, cutoff=0.8)
    if not close:
        return ""
    return f"; hyperparameters are set with --hp: did you mean --hp={close[0]}=...? (--hp=help lists them)"


def main(argv):
    cli.no_extra_args(argv)
    if "help" in FLAGS.hp:
        print_hparams()
        return
    stop = shutdown.StopRequest.on_signals()  # before any slow step: a signal there stops at once
    prepared = launch.prepare(request_from_flags())
    result = launch.execute(prepared, stop_requested=stop.requested)
    report(result, prepared, stop)


def report(result: launch.RunResult, prepared: launch.Prepared, stop: shutdown.StopRequest) -> None:
    """The lines a user reads at the end: how the run ended, which policy it gives, and where its results are."""
    record, run_dir = result.record, result.run_dir
    if result.already_complete:
        policy = record.get("policy") or ("best" if record.get("best") else "last")  # older result.json: no key
        print(f"the run in {run_dir} is complete (its {policy} policy: "
              f"return={record['return_mean']:.2f} +/- {record['return_std']:.2f}): nothing to do; export it again "
              f"with tfrl export --run_dir={run_dir}, or train on with --hp=total_env_steps=N", flush=True)
        return
    if record["kind"] == "stopped":
        resume = f"tfrl train --resume --run_dir={run_dir}" if run_dir else "the same command"
        print(f"stopped by {stop.signal_name} at env step {record['env_step']}: checkpoint {record['checkpoint']} "
              f"saved; continue with: {resume}", flush=True)
        return
    last = record.get("last", record)
    early = f" stopped_early_by={last['stopped_early_by']}" if "stopped_early_by" in last else ""
    print(f"final evaluation: env={prepared.env.name} episodes={last['episodes']} "
          f"return={last['return_mean']:.2f} +/- {last['return_std']:.2f} "
          f"env_steps={last['env_step']} wall_time_s={last['wall_time_s']:.1f}{early} "
          f"run_dir={run_dir if run_dir else 'none (not the chief)'}", flush=True)
    if result.variables_sha256 is not None:
        print(f"final checkpoint: task={result.task} variables_sha256={result.variables_sha256}", flush=True)
    best = record.get("best")  # keep_best_policy runs (tfrl.run.best_policy)
    if best is not None:
        selected = best["best_eval_return_mean"]  # None only if someone edited the best policy's JSON
        print(f"best policy: env step {best['best_env_step']} (periodic evaluation "
              f"{'unknown' if selected is None else f'{selected:.2f}'}): "
              f"return={best['return_mean']:.2f} +/- {best['return_std']:.2f} "
              f"over the final evaluation's {best['episodes']} episodes", flush=True)
    which = (f"the best policy (env step {best['best_env_step']}, return {best['return_mean']:.2f})" if best is not None
             else f"the last policy (return {last['return_mean']:.2f})")
    if result.saved_model is not None:
        print(f"exported: {result.saved_model}: {which}, the one tfrl evaluate and tfrl.load_policy take from the "
              "run dir", flush=True)
    elif prepared.chief:
        print(f"not exported (--export_base_path=): the run's policy is {which}", flush=True)


def help_text() -> str:
    return cli.flags_help(__doc__, [("Launcher flags", sys.modules[__name__]),
                                    ("Hardware flags (tfrl.hardware.runtime)", runtime_flags)])


def run():
    cli.run(main, unknown_flag_hint=unknown_flag_hint, help_text=help_text)


if __name__ == "__main__":
    run()
