"""Benchmark: tfrl against Stable-Baselines3, side by side, with the same hyperparameters, env and seeds.

    python benchmarks/compare.py --suite=a2c-cartpole --seeds=0,1,2
    python benchmarks/compare.py --suite=dqn-lunarlander --quick      # a smoke test of a couple of minutes
    python benchmarks/compare.py --suite=sac-lunarlandercontinuous --seeds=0 \
        --hp=total_env_steps=300000 --hp=log_interval=5000 --target_return=200   # time to a return, cut short

Suites: dqn-lunarlander, a2c-lunarlander, ppo-lunarlander, dqn-cartpole, a2c-cartpole, ppo-cartpole, ppo-pendulum,
sac-pendulum, ppo-lunarlandercontinuous, sac-lunarlandercontinuous, sac-bipedalwalker, and on MuJoCo (extra mujoco)
sac-, td3- and ppo- followed by halfcheetah, hopper, walker2d or ant; each
trains the rl-baselines3-zoo settings (the suite's `tfrl/presets/*-sb3zoo.json` preset; PPO's and SAC's own presets are the zoo's)
with both libraries. ppo-maskedpick trains tfrl's PPO with action masks against sb3-contrib's MaskablePPO on
tfrl/MaskedPick-v0 (the ppo-maskedpick preset: SB3's PPO defaults); neither network reads the mask. Runs alternate A B A B
(tfrl seed 0, SB3 seed 0, tfrl seed 1, ...), one process at a time, so that machine drift hits both.
Both get the same thread budget: --threads intra-op and inter-op threads (TF's thread settings,
torch.set_num_threads / set_num_interop_threads).

Per run: process wall time; training time (the runner's clock at its last "train" record: training
only, without imports, network construction and the final evaluation) and env steps/s over it;
process CPU time (user + system) and peak RSS of the child process (os.wait4's rusage); the greedy
return over the preset's final_eval_episodes (100); the learning curve (mean return of the training
episodes per log interval). Periodic evaluations and checkpoints are off in both (SB3 does neither
unless asked): the final tfrl checkpoint is the only extra work left, inside process wall time.

Also the in-graph floor: the suite's train step timed alone on random batches (DQN: K gradient steps in
one tf.function call, through benchmarks/dqn_train_step.py; A2C: one update per call), times the run's
gradient steps: what training would cost if acting, env stepping and replay took no time.

--hp=key=value overrides the suite's preset for both libraries (as train.py's --hp). With
--target_return=R the table also gives, per library, the first log interval whose training episodes'
mean return reached R: its env step and training time. Cutting total_env_steps leaves that time as the
full run's when no hyperparameter follows total_env_steps (a linear schedule does).

--libs=tfrl,sb3,sbx adds SBX (Stable-Baselines-Jax, extra bench-jax) as a third side for the DQN, PPO, SAC, TD3, TQC and CrossQ
suites, trained by sb3_runner.py --library=sbx on the same translation; runs alternate A B C A B C.

--reuse grows a comparison over several sittings: a seed whose runs (every library's) are already in the results
file with the same settings is not run again, and the table covers every seed of --seeds, saying when and on which
CPU each seed ran. Ratios stay per seed, between runs made side by side.

Output: a markdown table (median and [min, max] over seeds, and the tfrl/other ratio per seed pair) printed
and written into --docs between `<!-- compare:SUITE start -->` and `<!-- compare:SUITE end -->`, a PNG of
the learning curves, and the per-run records as JSON lines. A full run (not --quick) then rewrites the summary
table of benchmarks/summary.py in --docs, when that file holds its markers. The SB3 side needs the bench extra
(pip install 'tfrl[bench]': stable-baselines3 and a CPU torch); tfrl itself never does.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from absl import flags

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # tfrl from this checkout when run as a script

from tfrl import agents, cli, config as config_lib, errors, presets  # noqa: E402  (after the path fix)

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))  # benchmarks/stats.py, also when run through runpy
import results_io  # noqa: E402
import stats  # noqa: E402
from tfrl.errors import UsageError  # noqa: E402

CONFIG_DIR = REPO_ROOT / "tfrl" / "presets"
BENCHMARKS_DIR = REPO_ROOT / "benchmarks"


@dataclasses.dataclass(frozen=True)
class Suite:
    agent: str
    env_id: str
    preset: str  # a tfrl/presets/ file stem: the zoo's settings, which SB3's defaults complete
    floor: bool = True  # the in-graph floor is measured for flat observations only
    sb3_modules: tuple[str, ...] = ("stable_baselines3", "torch")  # what the SB3 side imports


SUITES = {
    "dqn-lunarlander": Suite("dqn", "LunarLander-v3", "dqn-lunarlander-sb3zoo"),
    "a2c-lunarlander": Suite("a2c", "LunarLander-v3", "a2c-lunarlander-sb3zoo"),
    "dqn-cartpole": Suite("dqn", "CartPole-v1", "dqn-cartpole-sb3zoo"),
    "a2c-cartpole": Suite("a2c", "CartPole-v1", "a2c-cartpole-sb3zoo"),
    "ppo-lunarlander": Suite("ppo", "LunarLander-v3", "ppo-lunarlander"),
    "ppo-cartpole": Suite("ppo", "CartPole-v1", "ppo-cartpole"),
    "ppo-pendulum": Suite("ppo", "Pendulum-v1", "ppo-pendulum"),
    "sac-pendulum": Suite("sac", "Pendulum-v1", "sac-pendulum"),
    "ppo-lunarlandercontinuous": Suite("ppo", "LunarLanderContinuous-v3", "ppo-lunarlandercontinuous"),
    "sac-lunarlandercontinuous": Suite("sac", "LunarLanderContinuous-v3", "sac-lunarlandercontinuous-sb3zoo"),
    "sac-bipedalwalker": Suite("sac", "BipedalWalker-v3", "sac-bipedalwalker-sb3zoo"),
    # MuJoCo (v5 ids; the zoo's entries are for v4): sac-halfcheetah, td3-halfcheetah, ppo-halfcheetah, ..., ppo-ant.
    **{f"{agent}-{env}": Suite(agent, env_id, f"{agent}-{env}-sb3zoo")
       for env, env_id in (("halfcheetah", "HalfCheetah-v5"), ("hopper", "Hopper-v5"), ("walker2d", "Walker2d-v5"),
                           ("ant", "Ant-v5"))
       for agent in ("sac", "td3", "ppo")},
    # sb3-contrib's QR-DQN on the SB3 side.
    **{f"qrdqn-{env}": Suite("qrdqn", env_id, f"qrdqn-{env}-sb3zoo", sb3_modules=("stable_baselines3", "sb3_contrib",
                                                                                 "torch"))
       for env, env_id in (("cartpole", "CartPole-v1"), ("lunarlander", "LunarLander-v3"))},
    # sb3-contrib's TQC on the SB3 side.
    **{f"tqc-{env}": Suite("tqc", env_id, preset, sb3_modules=("stable_baselines3", "sb3_contrib", "torch"))
       for env, env_id, preset in (("pendulum", "Pendulum-v1", "tqc-pendulum"),  # the zoo's own uses gSDE
                                   ("halfcheetah", "HalfCheetah-v5", "tqc-halfcheetah-sb3zoo"),
                                   ("hopper", "Hopper-v5", "tqc-hopper-sb3zoo"))},
    # sb3-contrib's CrossQ on the SB3 side (SBX's with --libs=tfrl,sb3,sbx).
    **{f"crossq-{env}": Suite("crossq", env_id, preset, sb3_modules=("stable_baselines3", "sb3_contrib", "torch"))
       for env, env_id, preset in (("pendulum", "Pendulum-v1", "crossq-pendulum"),
                                   ("halfcheetah", "HalfCheetah-v5", "crossq-halfcheetah-sb3zoo"),
                                   ("hopper", "Hopper-v5", "crossq-hopper-sb3zoo"))},
    "ppo-maskedpick": Suite("ppo", "tfrl/MaskedPick-v0", "ppo-maskedpick", floor=False,
                            sb3_modules=("stable_baselines3", "sb3_contrib", "torch")),
    # Memory: sb3-contrib's RecurrentPPO on the SB3 side.
    "ppo-lstm-cartpolenovel": Suite("ppo", "tfrl/CartPoleNoVel-v1", "ppo-lstm-cartpolenovel-sb3zoo", floor=False,
                                    sb3_modules=("stable_baselines3", "sb3_contrib", "torch")),
    "ppo-lstm-pendulumnovel": Suite("ppo", "tfrl/PendulumNoVel-v1", "ppo-lstm-pendulumnovel-sb3zoo", floor=False,
                                    sb3_modules=("stable_baselines3", "sb3_contrib", "torch")),
}

# Both libraries: no periodic evaluations or checkpoints (SB3 does neither by default).
HARNESS_OVERRIDES = {"eval_interval": 0, "checkpoint_interval": 0}
# --quick: a few thousand env steps (DQN-CartPole's learning_starts is 1000) and 5 evaluation episodes. SAC and TD3
# start learning at env step 1000, so that the MuJoCo presets' learning_starts of 10000 still leave gradient steps.
QUICK_OVERRIDES = {
    "dqn": {"total_env_steps": 3000, "log_interval": 500, "final_eval_episodes": 5},
    "qrdqn": {"total_env_steps": 3000, "log_interval": 500, "final_eval_episodes": 5},
    "a2c": {"total_env_steps": 4000, "log_interval": 1000, "final_eval_episodes": 5},
    "ppo": {"total_env_steps": 4096, "log_interval": 1024, "final_eval_episodes": 5},
    "sac": {"total_env_steps": 2000, "learning_starts": 1000, "log_interval": 500, "final_eval_episodes": 5},
    "td3": {"total_env_steps": 2000, "learning_starts": 1000, "log_interval": 500, "final_eval_episodes": 5},
    "tqc": {"total_env_steps": 2000, "learning_starts": 1000, "log_interval": 500, "final_eval_episodes": 5},
    "crossq": {"total_env_steps": 2000, "learning_starts": 1000, "log_interval": 500, "final_eval_episodes": 5},
}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run: what both runners need. Written to <run>/spec.json for the runner."""

    suite: str
    agent: str
    env_id: str
    preset: str
    seed: int
    threads: int  # intra-op and inter-op threads
    overrides: dict  # applied on top of the preset (harness and --quick overrides)
    hparams: dict  # the resolved config (preset + overrides), as tfrl writes it to config.json


@dataclasses.dataclass(frozen=True)
class Runner:
    """A library under test: `command(spec, run_dir)` is the child process that trains it.

    The harness writes the spec to run_dir.parent / "spec.json" before it starts the child.
    The child must write run_dir/metrics.jsonl in tfrl's shape: "train" records (env_step, wall_time_s
    since training began, episode_return_mean) and a last "final_eval" record (return_mean, return_std,
    episodes).
    """

    name: str
    command: Callable[[RunSpec, pathlib.Path], list[str]]


def _tfrl_command(spec: RunSpec, run_dir: pathlib.Path) -> list[str]:
    return [sys.executable, str(REPO_ROOT / "scripts" / "train.py"), f"--agent={spec.agent}", f"--env={spec.env_id}",
            f"--preset={spec.preset}", f"--seed={spec.seed}", f"--run_dir={run_dir}", "--export_base_path=",
            f"--intra_op_threads={spec.threads}", f"--inter_op_threads={spec.threads}",
            *(f"--hp={key}={value}" for key, value in spec.overrides.items())]


def _sb3_command(spec: RunSpec, run_dir: pathlib.Path) -> list[str]:
    return [sys.executable, str(BENCHMARKS_DIR / "sb3_runner.py"), f"--spec={run_dir.parent / 'spec.json'}",
            f"--run_dir={run_dir}"]


def _sbx_command(spec: RunSpec, run_dir: pathlib.Path) -> list[str]:
    return [*_sb3_command(spec, run_dir), "--library=sbx"]


TFRL = Runner("tfrl", _tfrl_command)
SB3 = Runner("SB3", _sb3_command)
SBX = Runner("SBX", _sbx_command)
DEFAULT_PAIR = (TFRL, SB3)
LIBRARIES = {"tfrl": TFRL, "sb3": SB3, "sbx": SBX}  # --libs names
assert tuple(r.name for r in LIBRARIES.values()) == results_io.LIBRARY_NAMES

# ---- resolving a suite --------------------------------------------------------------------------


def config_class(agent: str) -> type:
    """The agent's config dataclass, without importing its learner (and TensorFlow)."""
    return agents.get(agent).config_cls


def resolve_hparams(suite: Suite, overrides: dict) -> dict:
    """The preset with `overrides`, resolved as scripts/train.py resolves `--preset=P --hp=k=v`."""
    preset = presets.find(suite.agent, suite.env_id, suite.preset, dirs=[CONFIG_DIR])
    config = config_lib.apply_overrides(config_class(suite.agent)(), preset.hparams, f"preset {preset.name}")
    config = config_lib.apply_overrides(config, overrides, "compare.py")
    return config_lib.to_dict(config)


def run_specs(suite_name: str, seeds: Sequence[int], threads: int, quick: bool,
              hp: Mapping[str, str] = MappingProxyType({})) -> list[RunSpec]:
    """One spec per seed: the suite's preset, then the harness's overrides, --quick's, and `hp` (--hp)."""
    if suite_name not in SUITES:
        raise UsageError(f"--suite: unknown suite {suite_name!r}; choose one of {', '.join(SUITES)}")
    fixed = sorted(set(hp) & set(HARNESS_OVERRIDES))
    if fixed:
        raise UsageError(f"--hp: compare.py sets {', '.join(fixed)} for both libraries; it cannot be overridden")
    suite = SUITES[suite_name]
    overrides = {**HARNESS_OVERRIDES, **(QUICK_OVERRIDES[suite.agent] if quick else {}), **hp}
    hparams = resolve_hparams(suite, overrides)
    return [RunSpec(suite_name, suite.agent, suite.env_id, suite.preset, seed, threads, overrides, hparams)
            for seed in seeds]


def run_order(specs: Sequence[RunSpec], pair: Sequence[Runner]) -> list[tuple[Runner, RunSpec]]:
    """A B A B: every library on seed 0, then every one on seed 1, ..., so drift over time hits each."""
    return [(runner, spec) for spec in specs for runner in pair]

# ---- one run ------------------------------------------------------------------------------------


def read_records(path: pathlib.Path) -> list[dict]:
    """The records of a fresh run's metrics.jsonl.

    Not tfrl.run.metrics.read_metrics: that module imports TensorFlow, and this process must stay small
    (see `harness_rss_mb`). A fresh run dir has no resume records, whose orphans read_metrics drops.
    """
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if any(r["kind"] == "resume" for r in records):
        raise RuntimeError(f"{path}: a resumed run; compare.py starts every run in a new directory")
    return records


def harness_rss_mb() -> float:
    """This process's peak RSS (VmHWM), in MB.

    Linux counts it in every child's ru_maxrss too: the child starts as a copy of this process
    (fork or vfork) and exec() carries that copy's high-water mark over. So the harness stays small
    (no TensorFlow, torch or SB3 imports) and reports this number next to the children's.
    """
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def run_once(runner: Runner, spec: RunSpec, order: int, work_dir: pathlib.Path) -> dict:
    """Runs the child, waits for it with os.wait4 (its own rusage), and returns the run's record."""
    run_path = work_dir / f"{order:02d}-{runner.name}-s{spec.seed}"
    run_path.mkdir(parents=True)
    (run_path / "spec.json").write_text(json.dumps(dataclasses.asdict(spec), indent=2) + "\n")
    run_dir = run_path / "run"
    command = runner.command(spec, run_dir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": str(spec.threads)}
    with open(run_path / "stdout.txt", "w") as out, open(run_path / "stderr.txt", "w") as err:
        start = time.perf_counter()
        # In its own dir: what a library writes into its working dir (MuJoCo's MUJOCO_LOG.TXT) goes with the run.
        child = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=run_path)
        _, status, usage = os.wait4(child.pid, 0)
        wall_s = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
    if child.returncode != 0:
        tail = (run_path / "stderr.txt").read_text()[-2000:]
        raise RuntimeError(f"{runner.name} seed {spec.seed} exited with {child.returncode}; "
                           f"stderr ends:\n{tail}")
    saved_config = run_dir / "config.json"
    if saved_config.exists():  # tfrl's: it must have trained exactly the hyperparameters SB3 got
        saved = json.loads(saved_config.read_text())["hparams"]
        if saved != json.loads(json.dumps(spec.hparams)):
            raise RuntimeError(f"{runner.name} trained other hyperparameters than the spec: {saved}")
    records = read_records(run_dir / "metrics.jsonl")
    train = [r for r in records if r["kind"] == "train"]
    final = [r for r in records if r["kind"] == "final_eval"][-1]
    train_s = train[-1]["wall_time_s"]
    return {
        "suite": spec.suite, "library": runner.name, "seed": spec.seed, "order": order, "env_id": spec.env_id,
        "threads": spec.threads, "env_steps": final["env_step"],
        "wall_s": round(wall_s, 2), "train_s": train_s,
        "env_steps_per_s": round(train[-1]["env_step"] / train_s, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux reports KiB
        "harness_rss_mb": harness_rss_mb(),
        "return_mean": final["return_mean"], "return_std": final["return_std"], "eval_episodes": final["episodes"],
        # [env step, training seconds, mean return of the training episodes of that log interval]
        "curve": [[r["env_step"], r["wall_time_s"], r["episode_return_mean"]]
                  for r in train if "episode_return_mean" in r],
        "command": " ".join(command).replace(str(REPO_ROOT) + "/", "").replace(str(work_dir) + "/", ""),
        # what --reuse matches a later comparison's runs against, and where this one ran
        "overrides": spec.overrides, "hparams": spec.hparams, "cpu": cpu_model(),
    }

# ---- the in-graph floor -------------------------------------------------------------------------


def _random_rollout(rows: int, info, rng):
    """An actor-critic Rollout of random rows, for timing an update."""
    import numpy as np

    from tfrl.agents.actor_critic.rollout import Rollout

    if info.action_shape:  # a Box: Gaussian samples
        actions = rng.normal(size=(rows, info.action_size)).astype(np.float32)
        log_probs = np.full(rows, -0.5 * np.log(2 * np.pi) * info.action_size, np.float32)
    else:
        actions = rng.integers(0, info.num_actions, size=rows).astype(np.int32)
        log_probs = np.full(rows, -np.log(info.num_actions), np.float32)
    return Rollout(obs=rng.normal(size=(rows, *info.obs_shape)).astype(np.float32), actions=actions,
                   advantages=rng.normal(size=rows).astype(np.float32), returns=rng.normal(size=rows).astype(np.float32),
                   log_probs=log_probs, start_env_step=0)


def _env_info(env_id: str):
    """The EnvInfo a run of env_id trains with: its env made as tfrl makes it (which also routes MuJoCo's
    warnings to logging instead of printing them and appending them to MUJOCO_LOG.TXT in the working dir)."""
    from tfrl import envs

    vector_env = envs.make_vector_env(env_id, num_envs=1, seed=0)
    try:
        return envs.env_info(vector_env, env_id)
    finally:
        vector_env.close()


def _off_policy_floor(agent: str, config, info, runtime, rng, calls: int, repeats: int):
    """(wall s, CPU s) per call of SAC's, TQC's, CrossQ's or TD3's train step on random transitions, K per call, and the run's
    steps."""
    import dqn_train_step  # noqa: E402  (benchmarks/ is on the path)

    k = config.gradient_steps_per_train
    train_call = dqn_train_step.off_policy_train_call(agent, config, info, runtime, rng)
    wall, cpu = dqn_train_step.time_calls(train_call, calls, repeats)
    first = max(config.learning_starts, config.train_period_env_steps)
    run_steps = (max(config.total_env_steps - first, 0) // config.train_period_env_steps + 1) * k
    return wall, cpu, k, run_steps


def measure_floor(spec: RunSpec, calls: int, repeats: int) -> dict:
    """Seconds per gradient step of the suite's train step alone (random batches), and for the whole run.

    Call in a fresh process: it applies the thread settings to this process's TensorFlow.
    """
    import numpy as np

    sys.path.insert(0, str(BENCHMARKS_DIR))
    import dqn_train_step  # noqa: E402
    from tfrl.hardware import runtime as runtime_lib

    from tfrl.hardware import runtime_defaults

    preset = presets.find(spec.agent, spec.env_id, spec.preset, dirs=[CONFIG_DIR])
    runtime = runtime_lib.apply(runtime_defaults.resolved(  # XLA and precision as the run's train.py resolves them
        runtime_lib.RuntimeOptions(intra_op_threads=spec.threads, inter_op_threads=spec.threads), preset.runtime))
    config = config_lib.apply_overrides(config_class(spec.agent)(), spec.hparams, "spec")
    info = _env_info(spec.env_id)
    rng = np.random.default_rng(0)
    if spec.agent in ("dqn", "qrdqn"):
        from tfrl.agents.dqn.learning import ReplayBatch

        learner = agents.get(spec.agent).learner_cls(config, info, runtime)
        batch = dqn_train_step.random_batch(config.gradient_steps_per_train, config.batch_size, info.obs_shape,
                                            info.num_actions, config.gamma, rng)
        wall, cpu = dqn_train_step.time_calls(lambda: learner.update(ReplayBatch(batch, False)), calls, repeats)
        steps_per_call, run_steps = config.gradient_steps_per_train, config.total_gradient_steps
    elif spec.agent in ("sac", "tqc", "crossq", "td3"):
        wall, cpu, steps_per_call, run_steps = _off_policy_floor(spec.agent, config, info, runtime, rng, calls,
                                                                 repeats)
    elif spec.agent == "ppo":
        from tfrl.agents.ppo.learning import PPOLearner

        learner = PPOLearner(config, info, runtime, seed=0)
        b = config.rollout_size  # one update: n_epochs passes of b / batch_size minibatch steps
        rollout = _random_rollout(b, info, rng)
        # A call is hundreds of minibatch steps (1,024 with the LunarLander zoo settings): fewer calls suffice.
        wall, cpu = dqn_train_step.time_calls(lambda: learner.update(rollout), min(calls, 10), repeats, warmup=2)
        steps_per_call = config.n_epochs * b // config.batch_size
        run_steps = -(-config.total_env_steps // b) * steps_per_call
    else:
        from tfrl.agents.a2c.learning import A2CLearner

        learner = A2CLearner(config, info, runtime)
        b = config.rollout_size  # one update trains on the whole rollout
        rollout = _random_rollout(b, info, rng)
        wall, cpu = dqn_train_step.time_calls(lambda: learner.update(rollout), calls, repeats)
        steps_per_call, run_steps = 1, -(-config.total_env_steps // b)
    return {"steps_per_call": steps_per_call, "ms_per_step": wall / steps_per_call * 1e3,
            "precision": runtime.options.mixed_precision, "xla": runtime.options.xla,
            "cpu_ms_per_step": cpu / steps_per_call * 1e3, "run_gradient_steps": run_steps,
            "run_floor_s": wall / steps_per_call * run_steps}


def floor_in_child(spec: RunSpec, quick: bool, work_dir: pathlib.Path) -> dict:
    spec_path = work_dir / "floor-spec.json"
    spec_path.write_text(json.dumps(dataclasses.asdict(spec)))
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), f"--measure_floor={spec_path}",
               f"--floor_calls={20 if quick else 200}", f"--floor_repeats={1 if quick else 3}"]
    completed = subprocess.run(command, capture_output=True, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": str(spec.threads)})
    if completed.returncode != 0:
        raise RuntimeError(f"floor measurement failed:\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])

# ---- the table ----------------------------------------------------------------------------------

# (record key, row label, digits)
METRICS = (
    ("wall_s", "process wall time (s)", 1),
    ("train_s", "training time (s)", 1),
    ("env_steps_per_s", "env steps/s (training)", 0),
    ("cpu_s", "process CPU time, user+sys (s)", 1),
    ("peak_rss_mb", "peak RSS (MB)", 0),
)


def summary_table(records: Sequence[dict], names: Sequence[str]) -> str:
    """Markdown: per metric, each library's median [min, max] over seeds, and per seed the ratio of the first
    library's number to each other's (the difference, for returns)."""
    base, others = names[0], list(names[1:])
    by_seed = {name: {r["seed"]: r for r in records if r["library"] == name} for name in names}
    seeds = sorted(set.intersection(*(set(by_seed[name]) for name in names)))
    rows = [f"| metric | {' | '.join(names)} | {' | '.join(f'{base}/{o} per seed' for o in others)} |",
            "|---|" + "---|" * (len(names) + len(others))]
    column = {name: (lambda key, name=name: [by_seed[name][s][key] for s in seeds]) for name in names}
    for key, label, digits in METRICS:
        ratios = [[x / y for x, y in zip(column[base](key), column[o](key))] for o in others]
        rows.append(f"| {label} | {' | '.join(results_io.median_spread(column[n](key), digits) for n in names)} "
                    f"| {' | '.join(results_io.median_spread(r, 2) for r in ratios)} |")
    # A ratio of returns means nothing when they can be negative: the difference instead.
    returns = {name: column[name]("return_mean") for name in names}
    differences = {o: [x - y for x, y in zip(returns[base], returns[o])] for o in others}
    episodes = by_seed[base][seeds[0]]["eval_episodes"]
    rows.append(f"| greedy return, mean of {episodes} episodes "
                f"| {' | '.join(results_io.median_spread(returns[n], 1) for n in names)} "
                f"| {' | '.join(f'{base} - {o}: {results_io.median_spread(differences[o], 1)}' for o in others)} |")
    rows.append(f"| greedy return: IQM [95 % stratified bootstrap CI] over seeds (benchmarks/stats.py) "
                f"| {' | '.join(stats.iqm_with_ci(returns[n]) for n in names)} "
                f"| {' | '.join(f'{base} - {o}: {stats.iqm_with_ci(differences[o])}' for o in others)} |")
    return "\n".join(rows)


def target_table(records: Sequence[dict], names: Sequence[str], target: float) -> str:
    """Markdown: per seed, when each library's training episodes first reached `target` on average."""
    def cell(record: dict, reached: tuple[int, float] | None) -> str:
        if reached is None:
            best = max((mean_return for *_, mean_return in record["curve"]), default=float("nan"))
            return f"not reached in {record['env_steps']} (best {best:.1f})"
        return f"{reached[0]} / {reached[1]:.1f}"

    base, others = names[0], list(names[1:])
    heads = [f"{base}: env steps / training s to a training mean return of {target:g}"] + [
        f"{o}: the same" for o in others]
    rows = [f"| seed | {' | '.join(heads)} | {' | '.join(f'{base}/{o} training s' for o in others)} |",
            "|---|" + "---|" * (len(names) + len(others))]
    by_seed = {name: {r["seed"]: r for r in records if r["library"] == name} for name in names}
    for seed in sorted(set.intersection(*(set(by_seed[name]) for name in names))):
        reached = {n: results_io.time_to_return(by_seed[n][seed], target) for n in names}
        ratios = [f"{reached[base][1] / reached[o][1]:.2f}" if reached[base] and reached[o] else "-" for o in others]
        rows.append(f"| {seed} | {' | '.join(cell(by_seed[n][seed], reached[n]) for n in names)} "
                    f"| {' | '.join(ratios)} |")
    return "\n".join(rows)


def floor_lines(floor: dict, records: Sequence[dict], names: Sequence[str]) -> str:
    call = (f"K={floor['steps_per_call']} gradient steps per `tf.function` call" if floor["steps_per_call"] > 1
            else "one update per call")
    settings = (f", {floor['precision']}, XLA {'on' if floor['xla'] else 'off'}" if "precision" in floor else "")
    lines = [f"In-graph floor (tfrl's train step alone on random batches, {call}{settings}): "
             f"{floor['ms_per_step']:.3f} ms wall ({floor['cpu_ms_per_step']:.3f} ms CPU) per gradient step; "
             f"the run's {floor['run_gradient_steps']} gradient steps take {floor['run_floor_s']:.1f} s at that rate."]
    for name in names:
        train_s = [r["train_s"] for r in records if r["library"] == name]
        lines.append(f"{name} training time / floor: {statistics.median(train_s) / floor['run_floor_s']:.1f}x (median).")
    return " ".join(lines)

# ---- machine, docs and plot ---------------------------------------------------------------------


def _version(*distributions: str) -> str:
    for distribution in distributions:
        try:
            return f"{distribution} {importlib.metadata.version(distribution)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return f"{distributions[0]} not installed"


def cpu_model() -> str:
    """lscpu's "Model name", or "unknown CPU"."""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def machine_description() -> str:
    model = cpu_model()
    versions = [_version(*names) for names in (("tensorflow-cpu", "tensorflow"), ("keras",), ("torch",),
                                                ("stable-baselines3",), ("sb3-contrib",), ("gymnasium",))]
    versions += [v for v in (_version("sbx-rl"), _version("jax")) if not v.endswith("not installed")]
    versions = ", ".join(versions)
    return f"{model}, nproc {os.cpu_count()}; Python {platform.python_version()}; {versions}"


def markdown_section(suite_name: str, specs: Sequence[RunSpec], records: Sequence[dict], floor: dict | None,
                     names: Sequence[str], command: str, started: str, load: tuple[str, str],
                     plot_name: str | None, target_return: float | None = None, runs: str | None = None,
                     nothing_ran: bool = False, results_name: str | None = None) -> str:
    """`runs`: where the runs come from when some were reused (provenance); the load and machine lines are then
    this invocation's. `nothing_ran`: every seed was reused, so this invocation trained nothing. `results_name`:
    the file the run records were appended to, as the section names it (None: not kept, not named)."""
    spec = specs[0]
    hp = spec.hparams
    lines = [
        f"### {suite_name}: {names[0]} against {' and '.join(names[1:])}", "",
        "```", command, "```", "",
        *([runs] if runs else []),
        (f"Run {started} UTC; load average (1 min) {load[0]} at the start, {load[1]} at the end, each run using "
         f"{spec.threads} thread(s): a load well above that means other jobs shared the machine and speeds are "
         "noisy (alternating the libraries makes the ratio fairer, not exact)."
         if not nothing_ran else
         f"Nothing ran again: this invocation ({started} UTC) wrote the table"
         f"{' and measured the in-graph floor' if floor else ''}; load average (1 min) {load[0]} at its start, "
         f"{load[1]} at its end."),
        f"Machine{' (this invocation)' if runs else ''}: {machine_description()}. "
        f"Threads: {spec.threads} intra-op and {spec.threads} inter-op "
        "for each (TF `--intra_op_threads/--inter_op_threads`, `torch.set_num_threads/set_num_interop_threads`"
        + ("; SBX: the process pinned to as many CPUs, and XLA's CPU client on one thread when that is 1"
           if "SBX" in names else "") + ").",
        f"Settings: `tfrl/presets/{spec.preset}.json` (overrides: "
        f"{', '.join(f'{k}={v}' for k, v in spec.overrides.items())}), {spec.env_id}, "
        f"{hp['total_env_steps']} env steps, seeds {', '.join(str(s.seed) for s in specs)}; greedy return over "
        f"{hp['final_eval_episodes']} episodes with `tfrl.run.evaluation` on the same env seeds for each.", "",
        summary_table(records, names), "",
        *([f"Each run (library, seed, the columns above): `{results_name}`.", ""] if results_name else []),
    ]
    if target_return is not None:
        lines += [f"Time to a return of {target_return:g}: the first log interval ({hp['log_interval']} env steps) "
                  "whose training episodes averaged that much (exploring policies, not greedy evaluations).", "",
                  target_table(records, names, target_return), ""]
    if floor is not None:
        lines += [floor_lines(floor, records, names), ""]
    if plot_name:
        lines += [f"![{suite_name} learning curves]({plot_name})", ""]
    return "\n".join(lines)


def plot_curves(records: Sequence[dict], names: Sequence[str], title: str, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for color, name in zip(("C0", "C1", "C2", "C3"), names):
        for i, r in enumerate(r for r in records if r["library"] == name):
            steps, _, returns = zip(*r["curve"]) if r["curve"] else ((), (), ())
            ax.plot(steps, returns, color=color, alpha=0.8, label=name if i == 0 else None)
    ax.set_xlabel("env steps")
    ax.set_ylabel("training episode return (mean per log interval)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)

# ---- the whole comparison -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Outputs:
    """Where a comparison writes; None = not written."""

    docs: pathlib.Path | None = None  # markdown file whose compare:SUITE section is replaced
    plot: pathlib.Path | None = None  # PNG of the learning curves
    results: pathlib.Path | None = None  # JSON-lines file the run records are appended to


def recorded_runs(results_path: pathlib.Path | None, specs: Sequence[RunSpec], names: Sequence[str]
                  ) -> dict[int, list[dict]]:
    """Seed -> the recorded runs, one per library of `names`, of the latest earlier comparison that ran that seed
    with these specs' settings (suite, threads, resolved hyperparameters; never --quick). A seed some library
    lacks is not in the result: it runs again for every library, so that each seed's runs stay side by side."""
    if results_path is None or not results_path.exists():
        return {}
    spec = specs[0]
    hparams = json.loads(json.dumps(spec.hparams))
    matching = [r for r in results_io.read_results_file(results_path)
                if r["suite"] == spec.suite and not r.get("quick") and r["threads"] == spec.threads
                and r.get("hparams") == hparams and r["library"] in names]
    seeds = {s.seed for s in specs}
    return {seed: runs for seed, runs in results_io.newest_side_by_side(matching, names).items() if seed in seeds}


def provenance(records: Sequence[dict], reused_seeds: set[int]) -> str:
    """Which comparison each seed's runs come from, and on which CPU: for a table that reuses recorded runs."""
    groups = {}
    for r in records:
        key = (r["seed"] in reused_seeds, r["started"], r.get("cpu", "CPU not recorded"))
        groups.setdefault(key, set()).add(r["seed"])
    parts = [f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, sorted(seeds)))} ran {when} UTC on {cpu}"
             + (" (recorded, reused)" if was_reused else " (this run)")
             for (was_reused, when, cpu), seeds in sorted(groups.items(), key=lambda item: min(item[1]))]
    return "Runs: " + "; ".join(parts) + ". Each seed's libraries ran side by side, alternated."


def compare(suite_name: str, seeds: Sequence[int], threads: int, quick: bool, pair: Sequence[Runner] = DEFAULT_PAIR,
            outputs: Outputs = Outputs(), command: str = "", measure_in_graph_floor: bool = True,
            hp: Mapping[str, str] = MappingProxyType({}), target_return: float | None = None,
            reuse: bool = False) -> tuple[list[dict], str]:
    """Runs the suite for every runner (A B A B, or A B C A B C), then the floor; returns (records, markdown
    section). With `reuse`, seeds whose runs outputs.results already holds (recorded_runs) are not run again."""
    docs_path, plot_path, results_path = outputs.docs, outputs.plot, outputs.results
    specs = run_specs(suite_name, seeds, threads, quick, hp)
    names = tuple(runner.name for runner in pair)
    reused = recorded_runs(results_path, specs, names) if reuse and not quick else {}
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    load_start = f"{os.getloadavg()[0]:.2f}"
    records = [r for spec in specs for r in reused.get(spec.seed, [])]
    with tempfile.TemporaryDirectory(prefix="tfrl-compare-") as tmp:
        base = pathlib.Path(tmp)
        to_run = [spec for spec in specs if spec.seed not in reused]
        for order, (runner, spec) in enumerate(run_order(to_run, pair)):
            record = {**run_once(runner, spec, order, base), "started": started, "quick": quick}
            records.append(record)
            print(json.dumps({k: v for k, v in record.items() if k != "curve"}), flush=True)
            if results_path is not None:
                results_path.parent.mkdir(parents=True, exist_ok=True)
                with open(results_path, "a") as f:
                    f.write(json.dumps(record) + "\n")
        floor = floor_in_child(specs[0], quick, base) if measure_in_graph_floor else None
    load_end = f"{os.getloadavg()[0]:.2f}"
    if plot_path is not None:
        plot_curves(records, names, f"{suite_name}{' (--quick)' if quick else ''}: {' vs '.join(names)}",
                    plot_path)
    plot_name = None
    if plot_path is not None:
        plot_name = os.path.relpath(plot_path, docs_path.parent) if docs_path is not None else plot_path.name
    records.sort(key=lambda r: (r["seed"], names.index(r["library"])))
    section = markdown_section(suite_name, specs, records, floor, names, command, started, (load_start, load_end),
                               plot_name, target_return, provenance(records, set(reused)) if reused else None,
                               nothing_ran=not to_run, results_name=_shown_path(results_path))
    if docs_path is not None:
        results_io.write_section(docs_path, suite_name, section)
        if not quick and results_path is not None:
            refresh_summary(summary_docs(docs_path), results_path.parent)
    return records, section


def _shown_path(path: pathlib.Path | None) -> str | None:
    """A results path as a section names it: relative to the repository when inside it."""
    if path is None:
        return None
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def summary_docs(docs_path: pathlib.Path) -> pathlib.Path:
    """Where the summary table of a suite's docs lives: in the file itself if it holds the summary's markers (one
    file for everything), else in the benchmarks.md beside its folder (docs/benchmarks/SUITE.md ->
    docs/benchmarks.md)."""
    if docs_path.exists() and "<!-- compare:summary start -->" in docs_path.read_text():
        return docs_path
    return docs_path.parent.parent / "benchmarks.md"


def refresh_summary(docs_path: pathlib.Path, results_dir: pathlib.Path) -> None:
    """Rewrites the summary table of benchmarks/summary.py from results_dir, in docs that hold its markers; never
    the repository's docs from results elsewhere (they would hold one suite, not every suite's runs)."""
    import summary  # benchmarks/summary.py imports this module

    if not docs_path.exists() or f"<!-- compare:{summary.SECTION} start -->" not in docs_path.read_text():
        return
    if (docs_path.resolve() == (REPO_ROOT / "docs" / "benchmarks.md").resolve()
            and results_dir.resolve() != (BENCHMARKS_DIR / "results").resolve()):
        return
    try:
        table = summary.markdown(results_dir, summary.MIN_SEEDS, "python benchmarks/summary.py")
    except UsageError:  # no suite has enough seeds yet: the section stays as it is
        return
    results_io.write_section(docs_path, summary.SECTION, table)

# ---- command line -------------------------------------------------------------------------------


def define_flags() -> None:
    flags.DEFINE_string("suite", None, f"One of: {', '.join(SUITES)}.")
    flags.DEFINE_list("seeds", None, "Seeds; default 0,1,2 (0 with --quick).")
    flags.DEFINE_integer("threads", 1, "Intra-op and inter-op threads for each library.")
    flags.DEFINE_list("libs", ["tfrl", "sb3"], f"The libraries, tfrl first: tfrl and one or more of "
                      f"{', '.join(n for n in LIBRARIES if n != 'tfrl')} (sbx: extra bench-jax).")
    flags.DEFINE_multi_string("hp", [], "Override of the suite's preset for both libraries, key=value, repeatable "
                              "(as train.py's --hp): --hp=total_env_steps=300000 --hp=log_interval=5000.")
    flags.DEFINE_float("target_return", None, "Also tabulate when each run's training episodes first averaged "
                       "this return (env step, training time).")
    flags.DEFINE_bool("quick", False, "Smoke test: a few thousand env steps, 5 evaluation episodes. Writes under "
                      "runs/compare-quick/ unless --docs/--plot/--results say otherwise.")
    flags.DEFINE_string("docs", None, "Markdown file to write the section into (default docs/benchmarks/SUITE.md; "
                        "with --quick runs/compare-quick/benchmarks.md); empty = print only.")
    flags.DEFINE_string("plot", None, "PNG of the learning curves (default docs/images/compare-SUITE.png).")
    flags.DEFINE_string("results", None, "JSON-lines file the run records are appended to "
                        "(default benchmarks/results/compare-SUITE.jsonl).")
    flags.DEFINE_bool("reuse", False, "Do not rerun a seed whose runs, every library's, are in --results with the "
                      "same settings (suite, threads, resolved hyperparameters); the table covers every seed of "
                      "--seeds and says which comparison each came from. For runs too long for one sitting.")
    flags.DEFINE_string("measure_floor", None, "Internal: measure the floor for this spec file and print JSON.")
    flags.DEFINE_integer("floor_calls", 200, "Internal: timed train calls per repeat of the floor.")
    flags.DEFINE_integer("floor_repeats", 3, "Internal: repeats of the floor timing (median).")


def require_bench_extra(suite: Suite, libs: Sequence[str] = ("tfrl", "sb3")) -> None:
    """Fails before anything runs, naming the extra. find_spec, not an import: torch would grow this
    process, and with it every child's measured peak RSS (see `harness_rss_mb`)."""
    missing = [module for module in suite.sb3_modules if importlib.util.find_spec(module) is None]
    extra = "bench"
    if "sbx" in libs and importlib.util.find_spec("sbx") is None:
        missing, extra = [*missing, "sbx"], "bench-jax"
    if missing:
        raise errors.MissingExtraError(
            f"benchmarks/compare.py (its Stable-Baselines side) needs {', '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: "
            f"pip install 'tfrl[{extra}]' (or pip install -e '.[{extra}]' in a checkout)")


def runners(libs: Sequence[str]) -> tuple[Runner, ...]:
    """The --libs names as runners; tfrl first, each once, at least one other."""
    libs = [name.strip().lower() for name in libs]
    unknown = [name for name in libs if name not in LIBRARIES]
    if unknown:
        raise UsageError(f"--libs: unknown {', '.join(unknown)}; known: {', '.join(LIBRARIES)}")
    if libs[:1] != ["tfrl"] or len(libs) < 2 or len(set(libs)) != len(libs):
        raise UsageError(f"--libs: tfrl first, then one or more others, each once; got {','.join(libs)}")
    return tuple(LIBRARIES[name] for name in libs)


def _path_flag(value: str | None, default: pathlib.Path) -> pathlib.Path | None:
    if value is None:
        return default
    return pathlib.Path(value) if value else None


def main(argv):
    cli.no_extra_args(argv)
    FLAGS = flags.FLAGS
    if FLAGS.measure_floor:
        spec = RunSpec(**json.loads(pathlib.Path(FLAGS.measure_floor).read_text()))
        print(json.dumps(measure_floor(spec, FLAGS.floor_calls, FLAGS.floor_repeats)))
        return
    if not FLAGS.suite:
        raise UsageError(f"--suite is required: one of {', '.join(SUITES)}")
    if FLAGS.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {FLAGS.threads}")
    try:
        seeds = [int(s) for s in (FLAGS.seeds or (["0"] if FLAGS.quick else ["0", "1", "2"]))]
    except ValueError:
        raise UsageError(f"--seeds: expected integers, got {','.join(FLAGS.seeds)}") from None
    if FLAGS.reuse and FLAGS.quick:
        raise UsageError("--reuse joins full runs only; --quick runs are never reused")
    hp = config_lib.parse_cli_overrides(FLAGS.hp)
    run_specs(FLAGS.suite, seeds, FLAGS.threads, FLAGS.quick, hp)  # bad suite, preset or --hp: fail before any run
    libraries = runners(FLAGS.libs)
    require_bench_extra(SUITES[FLAGS.suite], [name.strip().lower() for name in FLAGS.libs])
    out = REPO_ROOT / "runs" / "compare-quick" if FLAGS.quick else None
    docs = _path_flag(FLAGS.docs, out / "benchmarks.md" if out else REPO_ROOT / "docs" / "benchmarks" / f"{FLAGS.suite}.md")
    plot = _path_flag(FLAGS.plot, (out or REPO_ROOT / "docs" / "images") / f"compare-{FLAGS.suite}.png")
    results = _path_flag(FLAGS.results, (out or BENCHMARKS_DIR / "results") / f"compare-{FLAGS.suite}.jsonl")
    command = " ".join(["python", "benchmarks/compare.py", *sys.argv[1:]])
    _, section = compare(FLAGS.suite, seeds, FLAGS.threads, FLAGS.quick, libraries, Outputs(docs, plot, results),
                         command, hp=hp, target_return=FLAGS.target_return,
                         measure_in_graph_floor=SUITES[FLAGS.suite].floor, reuse=FLAGS.reuse)
    print(section)
    if docs is not None:
        print(f"written: {docs}" + (f", {plot}" if plot else ""))


if __name__ == "__main__":
    define_flags()
    cli.run(main)
