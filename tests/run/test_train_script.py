"""End-to-end tests of scripts/train.py, run as a user runs it: `python scripts/train.py ...` in a subprocess.

Every launch pays TensorFlow's import (~5 s), so all launches of this file start
at once in a module fixture, two at a time, the long learning run first; each
test waits for the launch it checks.
"""

import concurrent.futures
import dataclasses
import glob
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import warnings

import pytest

from tfrl import agents
from tfrl.run.metrics import TIMING_FIELDS

import behaviour_digests

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAIN = str(REPO_ROOT / "scripts" / "train.py")

# Lines TensorFlow's C++ runtime writes to stderr on import, whatever the script does.
_TF_NOISE = re.compile(r"^(WARNING: All log messages before absl::InitializeLog\(\)|[IWE]0000 00:00:|"
                       r"To enable the following instructions:)")


@dataclasses.dataclass
class Launch:
    returncode: int
    stdout: str
    stderr: str
    run_dir: pathlib.Path

    def stderr_lines(self):
        return [line for line in self.stderr.splitlines() if line.strip() and not _TF_NOISE.match(line)]


def _launch(args, run_dir, env=None):
    """Runs train.py with --run_dir=run_dir, unless args set --run_dir; "{tmp}" in args is run_dir's parent,
    which holds a regular file named a_file. env: the environment (default: this one, TF's C++ logs quiet)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    (run_dir.parent / "a_file").write_text("not a directory\n")
    args = [arg.replace("{tmp}", str(run_dir.parent)) for arg in args]
    if not any(arg.startswith("--run_dir=") for arg in args):
        args.append(f"--run_dir={run_dir}")
    if env is None:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO_ROOT / "tests"))  # custom_envs
        env.pop("KERAS_BACKEND", None)
    completed = subprocess.run([sys.executable, TRAIN, *args], capture_output=True,
                               text=True, cwd=REPO_ROOT, env=env, timeout=300)
    return Launch(completed.returncode, completed.stdout, completed.stderr, run_dir)


# A short CartPole run that learns: the dqn-cartpole preset (the rl-baselines3-zoo settings) cut from 50k to
# 30k env steps, with a 64x64 network instead of 256x256 to keep it near 30 s on 2 cores.
LEARNING_ARGS = [
    "--agent=dqn", "--env=CartPole-v1", "--seed=0",
    "--hp", "total_env_steps=30000", "--hp=hidden_sizes=64,64",  # "--hp key=value" (a space) is "--hp=key=value"
    "--hp=eval_interval=10000", "--hp=eval_episodes=5", "--hp=final_eval_episodes=20", "--hp=log_interval=5000",
]
RANDOM_POLICY_RETURN = 22  # CartPole-v1 under uniformly random actions, averaged over many episodes

# Short --deterministic runs of every agent (DQN plain and prioritized, A2C, PPO on CartPole, on Pendulum with
# normalization and on Catch's pixels, SAC on Pendulum; tiny networks, a few seconds each), launched with the
# CPU code paths and threads pinned (tests/behaviour_digests.py; twice each where this machine type has no
# recorded digests): enough updates, evaluations and checkpoints for every seeded thing to show in the numbers,
# and the digests of today's code to compare with.
REPRODUCIBLE_ARGS = behaviour_digests.RUNS

# keep_best_policy on a short DQN CartPole run: 6 periodic evaluations of 5 episodes (their returns differ while
# it learns), then the final 10 episodes of the last and of the best policy, and the export of the best.
BEST_POLICY_ARGS = [
    "--agent=dqn", "--env=CartPole-v1", "--preset=none", "--seed=4", "--hp=keep_best_policy=true",
    "--hp=total_env_steps=3000", "--hp=hidden_sizes=32,32", "--hp=learning_starts=200", "--hp=gradient_steps_per_train=1",
    "--hp=batch_size=32", "--hp=target_update_period_env_steps=100", "--hp=log_interval=1000", "--hp=eval_interval=500",
    "--hp=eval_episodes=5", "--hp=final_eval_episodes=10", "--hp=checkpoint_interval=0",
]

# A step size of 1e30: the first update (env step 600, after checkpoint 1 at 500) makes the weights ~1e30,
# and the next forward pass overflows float32.
DIVERGING_ARGS = [
    "--agent=dqn", "--env=CartPole-v1", "--preset=none", "--seed=0", "--hp=learning_rate=1e30",
    "--hp=total_env_steps=3000", "--hp=learning_starts=600", "--hp=checkpoint_interval=500",
    "--hp=hidden_sizes=16,16", "--hp=gradient_steps_per_train=1", "--hp=batch_size=32", "--hp=log_interval=500",
    "--hp=eval_interval=0",
]

# (case id, arguments, what the one error line must contain)
BAD_INPUTS = [
    ("unknown_agent", ["--agent=ddpg", "--env=CartPole-v1"],
     f"--agent: unknown agent 'ddpg'; choose one of {', '.join(agents.AGENT_NAMES)}"),
    ("unknown_env", ["--agent=dqn", "--env=CartPole-v9"],
     "unknown environment id 'CartPole-v9'; close matches: CartPole-v1"),
    ("unknown_flag", ["--agent=dqn", "--env=CartPole-v1", "--nonsense=1"], "Unknown command line flag 'nonsense'"),
    ("bad_mixed_precision", ["--agent=dqn", "--env=CartPole-v1", "--mixed_precision=fp16"],
     "--mixed_precision: unknown policy 'fp16'; choose one of float32, mixed_float16, mixed_bfloat16"),
    ("missing_gpu", ["--agent=dqn", "--env=CartPole-v1", "--device=gpu:7"], "--device=gpu:7 but "),
    ("unknown_hparam", ["--agent=dqn", "--env=CartPole-v1", "--hp=unknown_key=1"],
     "--hp: unknown hyperparameter 'unknown_key' for DQNConfig"),
    ("ill_typed_hparam", ["--agent=dqn", "--env=CartPole-v1", "--hp=batch_size=abc"],
     "hyperparameter 'batch_size': 'abc' is not a valid int"),
    ("zero_envs", ["--agent=dqn", "--env=CartPole-v1", "--num_envs=0"], "--num_envs must be >= 1, got 0"),
    ("missing_agent", ["--env=CartPole-v1"], "--agent and --env are required"),
    # The rest are checked before TensorFlow loads: each launch takes well under a second of CPU.
    ("unknown_device", ["--agent=dqn", "--env=CartPole-v1", "--device=tpu"],
     "--device: cannot parse 'tpu'; choose one of auto, cpu, cpu:N, gpu, gpu:N"),
    ("negative_envs", ["--agent=a2c", "--env=CartPole-v1", "--num_envs=-4"], "--num_envs must be >= 1, got -4"),
    ("negative_seed", ["--agent=dqn", "--env=CartPole-v1", "--seed=-1"], "--seed must be in [0, 4294967295], got -1"),
    ("seed_over_32_bits", ["--agent=dqn", "--env=CartPole-v1", "--seed=4294967296"],
     "--seed must be in [0, 4294967295], got 4294967296"),
    ("zero_batch_size", ["--agent=dqn", "--env=CartPole-v1", "--hp=batch_size=0"], "batch_size must be > 0, got 0"),
    ("negative_learning_rate", ["--agent=a2c", "--env=CartPole-v1", "--hp=learning_rate=-0.001"],
     "learning_rate must be > 0, got -0.001"),
    ("zero_rollout", ["--agent=a2c", "--env=CartPole-v1", "--hp=rollout_length=0"], "rollout_length must be > 0, got 0"),
    ("zero_layer", ["--agent=dqn", "--env=CartPole-v1", "--hp=hidden_sizes=64,0"],
     "hidden_sizes must be positive layer sizes, got (64, 0)"),
    ("zero_threads", ["--agent=dqn", "--env=CartPole-v1", "--logical_cpus=0"], "--logical_cpus: must be >= 1, got 0"),
    ("bad_vector_mode", ["--agent=dqn", "--env=CartPole-v1", "--vector_mode=threads"],
     "--vector_mode: unknown mode 'threads'; choose one of sync, async"),
    ("run_dir_not_creatable", ["--agent=dqn", "--env=CartPole-v1", "--run_dir={tmp}/a_file/run"],
     "--run_dir: cannot create {tmp}/a_file/run: {tmp}/a_file is not a directory"),
    ("export_dir_not_creatable", ["--agent=dqn", "--env=CartPole-v1", "--export_base_path={tmp}/a_file/models"],
     "--export_base_path: cannot create {tmp}/a_file/models: {tmp}/a_file is not a directory"),
    ("keep_best_without_evaluations", ["--agent=a2c", "--env=CartPole-v1", "--hp=keep_best_policy=true",
                                       "--hp=eval_interval=0"],
     "keep_best_policy needs periodic evaluations: eval_interval > 0 and eval_episodes > 0"),
    ("negative_keep_checkpoints", ["--agent=dqn", "--env=CartPole-v1", "--keep_checkpoints=-1"],
     "--keep_checkpoints must be >= 0 (0 keeps every checkpoint), got -1"),
    ("run_dir_of_no_run", ["--agent=dqn", "--env=CartPole-v1", "--run_dir={tmp}"],
     "--run_dir {tmp} is not empty and holds no tfrl run (no config.json); pick a new one"),
    ("run_dir_is_a_file", ["--agent=dqn", "--env=CartPole-v1", "--run_dir={tmp}/a_file"],
     "--run_dir: {tmp}/a_file exists and is not a directory"),
    # Bringing your own env, and a command line that explains itself.
    ("hparam_as_flag", ["--agent=dqn", "--env=CartPole-v1", "--lerning_rate=3"],
     "Unknown command line flag 'lerning_rate'; hyperparameters are set with --hp: did you mean "
     "--hp=learning_rate=...? (--hp=help lists them)"),
    ("total_steps_as_flag", ["--agent=ppo", "--env=CartPole-v1", "--total_env_steps=5000"],
     "did you mean --hp=total_env_steps=...?"),
    ("envpool_lacks_the_id", ["--agent=ppo", "--env=custom_envs:Corridor-v0", "--vector_mode=envpool"],
     "--vector_mode=envpool: EnvPool has no custom_envs:Corridor-v0; use --vector_mode=sync or async"),
    ("unknown_module", ["--agent=dqn", "--env=no_such_module:Maze-v0"],
     "--env=no_such_module:Maze-v0: cannot import module 'no_such_module'"),
    ("id_the_module_lacks", ["--agent=dqn", "--env=custom_envs:Coridor-v0"],
     "unknown environment id 'custom_envs:Coridor-v0' (module custom_envs registers no such id); close matches: "
     "Corridor-v0"),
    ("dict_observations_with_text", ["--agent=ppo", "--env=custom_envs:TextDictCorridor-v0"],
     "entry 'name' has space Text"),
    ("continuous_actions_for_dqn", ["--agent=dqn", "--env=Pendulum-v1"],
     "--agent=dqn acts in discrete action spaces; Pendulum-v1 has Box actions: use --agent=a2c or --agent=ppo"),
    ("unbounded_box_actions", ["--agent=ppo", "--env=custom_envs:UnboundedCorridor-v0"],
     "has Box actions with infinite bounds"),
    ("multi_discrete_actions_for_dqn", ["--agent=dqn", "--env=custom_envs:MultiDiscreteCorridor-v0"],
     "--agent=dqn acts in discrete action spaces; custom_envs:MultiDiscreteCorridor-v0 has MultiDiscrete actions"),
    ("missing_config_dir", ["--agent=dqn", "--env=CartPole-v1", "--config_dir={tmp}/nowhere"],
     "--config_dir: {tmp}/nowhere is not a directory"),
    ("model_name_with_a_slash", ["--agent=dqn", "--env=CartPole-v1", "--model_name=a/b"],
     "--model_name must be a plain directory name, got 'a/b'"),
    ("infinite_learning_rate", ["--agent=dqn", "--env=CartPole-v1", "--hp=learning_rate=inf"],
     "hyperparameter 'learning_rate': 'inf' is not a finite number"),
    ("hp_help_without_agent", ["--env=CartPole-v1", "--hp=help"], "--hp=help lists the hyperparameters of one agent"),
    ("bad_env_kwarg", ["--agent=dqn", "--env=FrozenLake-v1", "--env_kwargs=is_slipery=false"], "is_slipery"),
]

# Bring your own env, from the command line: a corridor with a known optimal return (tests/custom_envs.py) by
# its "module:Id", and FrozenLake (Discrete observations, one-hot) with an env keyword argument.
CUSTOM_ENV_ARGS = [
    "--agent=dqn", "--env=custom_envs:Corridor-v0", "--preset=none", "--export_base_path=",
    "--hp=total_env_steps=3000", "--hp=hidden_sizes=32", "--hp=learning_starts=200", "--hp=batch_size=32",
    "--hp=gradient_steps_per_train=1", "--hp=target_update_period_env_steps=100", "--hp=learning_rate=1e-3",
    "--hp=eval_interval=0", "--hp=final_eval_episodes=5", "--hp=checkpoint_interval=0", "--hp=log_interval=1000",
]
FROZEN_LAKE_ARGS = [
    "--agent=dqn", "--env=FrozenLake-v1", "--env_kwargs=is_slippery=false", "--preset=none",
    "--hp=total_env_steps=8000", "--hp=hidden_sizes=32", "--hp=learning_starts=500", "--hp=batch_size=32",
    "--hp=gradient_steps_per_train=1", "--hp=target_update_period_env_steps=200", "--hp=learning_rate=1e-3",
    "--hp=gamma=0.95", "--hp=epsilon_decay_fraction=0.5", "--hp=eval_interval=0", "--hp=final_eval_episodes=5",
    "--hp=checkpoint_interval=0", "--hp=log_interval=2000",
]
EXPLAINING_ARGS = {
    "hp_help": ["--agent=ppo", "--env=CartPole-v1", "--hp=help"],
    "help": ["--help"],
    # A bad input found once TensorFlow has loaded, with TF's own logs asked for.
    "tf_logs": ["--agent=dqn", "--env=CartPole-v1", "--device=gpu:7", "--tf_logs"],
}


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """Starts every launch of this module, two at a time; returns {name: Future[Launch]}."""
    base = tmp_path_factory.mktemp("train_script")
    jobs = [("learning", LEARNING_ARGS), ("diverging", DIVERGING_ARGS), ("best_policy", BEST_POLICY_ARGS),
            ("custom_env", CUSTOM_ENV_ARGS), ("frozen_lake", FROZEN_LAKE_ARGS)]
    jobs += [(name, args) for name, args, _ in BAD_INPUTS]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    futures = {name: pool.submit(_launch, args, base / name / "run") for name, args in jobs[:5]}
    futures.update({f"{name}_a": pool.submit(_launch, args, base / f"{name}_a" / "run", behaviour_digests.pinned_env())
                    for name, args in REPRODUCIBLE_ARGS.items()})
    futures["second_copies"] = pool.submit(_second_copies, base)
    futures.update({name: pool.submit(_launch, args, base / name / "run") for name, args in jobs[5:]})
    futures.update({name: pool.submit(_launch, args, base / name / "run") for name, args in EXPLAINING_ARGS.items()})
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def _second_copies(base):
    """{run: its second launch} of the pinned runs this machine has no recorded digests for; {run: None} for those
    it has, whose first launch the digest test checks bit for bit against the recorded one (a launch at the
    recording), which is the same check as a second launch now, without the ~9 s of CPU each."""
    recorded = behaviour_digests.recorded().get("machines", {}).get(behaviour_digests.machine_key(), {})
    return {name: None if name in recorded.get("digests", {}) else
            _launch(args, base / f"{name}_b" / "run", behaviour_digests.pinned_env())
            for name, args in REPRODUCIBLE_ARGS.items()}


def _same_as_another_launch(launches, name):
    """Asserts that the pinned run `name` gave what another launch of the same command gives: its second launch
    here, or the digests recorded on this machine type; returns its first launch."""
    first = launches[f"{name}_a"].result()
    assert first.returncode == 0, first.stderr[-3000:]
    second = launches["second_copies"].result()[name]
    digest = behaviour_digests.digest(first.run_dir)
    if second is None:
        machine = behaviour_digests.recorded()["machines"][behaviour_digests.machine_key()]
        assert digest == machine["digests"][name], f"{name}: differs from the launch recorded on this machine type"
    else:
        assert second.returncode == 0, second.stderr[-3000:]
        assert digest == behaviour_digests.digest(second.run_dir), f"{name}: two launches of one command differ"
        assert json.dumps(_records_without_timing(first)) == json.dumps(_records_without_timing(second))
    return first


# --- bad input: exit 2, one line, no traceback, nothing written ---------------------------

@pytest.mark.parametrize("name, args, message", BAD_INPUTS, ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_exits_2_with_one_error_line_and_writes_nothing(launches, name, args, message):
    launch = launches[name].result()
    assert launch.returncode == 2, launch.stderr[-2000:]
    assert "Traceback" not in launch.stderr
    lines = launch.stderr_lines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("train.py: error: "), lines
    assert message.replace("{tmp}", str(launch.run_dir.parent)) in lines[0]
    assert not launch.run_dir.exists()
    assert sorted(p.name for p in launch.run_dir.parent.iterdir()) == ["a_file"]  # nothing written beside it
    assert launch.stdout == ""


# --- bring your own env, and a command line that explains itself ---------------------------

@pytest.mark.parametrize("name, expected_return", [("custom_env", 0.8), ("frozen_lake", 1.0)])
def test_a_custom_env_and_frozen_lake_are_learned_from_the_command_line(launches, name, expected_return):
    launch = launches[name].result()
    assert launch.returncode == 0, launch.stderr[-3000:]
    final = re.search(r"^final evaluation: env=(\S+) episodes=5 return=(-?[\d.]+) ", launch.stdout, re.M)
    assert final, launch.stdout
    assert final.group(1) == {"custom_env": "custom_envs:Corridor-v0", "frozen_lake": "FrozenLake-v1"}[name]
    assert float(final.group(2)) == pytest.approx(expected_return)  # the optimum: every greedy episode succeeds
    config = json.loads((launch.run_dir / "config.json").read_text())
    if name == "frozen_lake":  # the kwarg reached gymnasium.make; the 16 Discrete states are one-hot
        assert config["env_kwargs"] == {"is_slippery": False}
        assert config["env_info"] == {"env_id": "FrozenLake-v1", "obs_shape": [16], "num_actions": 4,
                                      "env_space": {"type": "Discrete", "n": 16, "start": 0}}


def test_hp_help_lists_every_hyperparameter_with_default_and_preset_value(launches):
    launch = launches["hp_help"].result()
    assert launch.returncode == 0, launch.stderr[-2000:]
    assert launch.stdout.startswith("PPOConfig hyperparameters (preset ppo-cartpole); set one with --hp=name=value:")
    assert "  rollout_length (int): default 256, preset 32\n" in launch.stdout
    assert "  clip_range (float): default 0.2\n" in launch.stdout
    assert "Rollout length per env, in vector steps" in launch.stdout
    from tfrl.agents.ppo.config import PPOConfig
    for field in dataclasses.fields(PPOConfig):
        assert f"\n  {field.name} (" in launch.stdout, field.name
    assert not launch.run_dir.exists()


def test_help_lists_the_launcher_and_hardware_flags(launches):
    launch = launches["help"].result()
    assert launch.returncode == 0, launch.stderr[-2000:]
    for flag in ("--agent", "--env", "--env_kwargs", "--hp", "--preset", "--run_dir", "--[no]xla", "--mixed_precision",
                 "--device", "--strategy", "--[no]deterministic", "--visible_gpus"):
        assert f"\n  {flag}:" in launch.stdout, flag
    assert "--hp=help lists every hyperparameter" in launch.stdout


# --- a learning run ------------------------------------------------------------------------

FINAL_LINE = re.compile(r"^final evaluation: env=CartPole-v1 episodes=(\d+) return=(-?[\d.]+) \+/- ([\d.]+) "
                        r"env_steps=(\d+) wall_time_s=([\d.]+) run_dir=(.+)$")


@pytest.fixture(scope="module")
def learning_run(launches):
    launch = launches["learning"].result()
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert "Traceback" not in launch.stderr
    return launch


def test_tensorflow_start_up_noise_is_hidden_unless_asked_for(learning_run, launches):
    for noise in ("oneDNN custom operations", "All log messages before absl::InitializeLog", "cpu_feature_guard",
                  "Sharding callback duration", "Assets written to"):
        assert noise not in learning_run.stderr, noise
    assert "final evaluation: " in learning_run.stdout and "[final_eval]" in learning_run.stderr  # tfrl's own
    shown = launches["tf_logs"].result()
    assert shown.returncode == 2 and "--device=gpu:7 but " in shown.stderr_lines()[-1]
    assert "oneDNN custom operations" in shown.stderr


def test_learning_run_beats_random_play(learning_run):
    finals = [FINAL_LINE.match(line) for line in learning_run.stdout.splitlines()]
    finals = [m for m in finals if m]
    assert len(finals) == 1, learning_run.stdout
    episodes, mean_return, _, env_steps, _, run_dir = finals[0].groups()
    assert (int(episodes), int(env_steps), run_dir) == (20, 30000, str(learning_run.run_dir))
    # Random play averages ~22; a policy that balances the pole for 150+ steps has learned.
    assert float(mean_return) >= 150, f"final return {mean_return} (random play: ~{RANDOM_POLICY_RETURN})"


def test_learning_run_writes_resolved_config(learning_run):
    config = json.loads((learning_run.run_dir / "config.json").read_text())
    assert (config["agent"], config["env_id"], config["seed"]) == ("dqn", "CartPole-v1", 0)
    assert config["preset"] == "dqn-cartpole"
    hparams = config["hparams"]
    assert hparams["total_env_steps"] == 30000  # --hp total_env_steps=30000 (with a space)
    assert hparams["hidden_sizes"] == [64, 64]  # --hp, as a JSON list
    assert hparams["learning_rate"] == 2.3e-3  # from the preset
    assert hparams["train_period_env_steps"] == 256 and hparams["gradient_steps_per_train"] == 128  # from the preset
    assert hparams["epsilon_start"] == 1.0  # a DQNConfig default neither overrides
    assert config["runtime"]["mixed_precision"] == "float32"


def test_learning_run_writes_metrics_jsonl(learning_run):
    records = [json.loads(line) for line in (learning_run.run_dir / "metrics.jsonl").read_text().splitlines()]
    by_kind = {}
    for record in records:
        by_kind.setdefault(record["kind"], []).append(record)
    assert [r["env_step"] for r in by_kind["train"]] == [5000, 10000, 15000, 20000, 25000, 30000]
    assert [r["env_step"] for r in by_kind["eval"]] == [10000, 20000, 30000]
    assert len(by_kind["final_eval"]) == 1
    final = by_kind["final_eval"][0]
    assert (final["env_step"], final["episodes"]) == (30000, 20)
    assert final["return_mean"] >= 150
    for record in by_kind["train"]:
        assert math.isfinite(record["loss"]) and math.isfinite(record["q_mean"])
        assert record["episodes"] > 0 and record["episode_return_mean"] > 0
    # Train calls at env steps 1000 (learning_starts), 1256, ..., 29928: (30000 - 1000) // 256 + 1 = 114 calls
    # of 128 gradient steps = 14592.
    assert final["gradient_steps"] == 14592
    assert by_kind["train"][-1]["epsilon"] == pytest.approx(0.04)  # the preset's epsilon_end


def test_learning_run_writes_tensorboard_events(learning_run):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    event_files = glob.glob(str(learning_run.run_dir / "tensorboard" / "events.out.tfevents.*"))
    assert event_files
    tags = {value.tag for path in event_files for event in EventFileLoader(path).Load()
            for value in event.summary.value}
    assert {"episode/return", "train/loss", "eval/return_mean", "final_eval/return_mean"} <= tags


# --- keep_best_policy: the best periodic evaluation's policy is evaluated and exported ------------

def test_keep_best_policy_evaluates_and_exports_the_best_evaluated_policy(launches):
    from tfrl.models import export, serving
    from tfrl.run import evaluation

    launch = launches["best_policy"].result()
    assert launch.returncode == 0, launch.stderr[-3000:]
    records = [json.loads(line) for line in (launch.run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["env_step"] for r in evals] == [500, 1000, 1500, 2000, 2500, 3000]
    returns = [r["return_mean"] for r in evals]
    assert len(set(returns)) > 1, returns  # a selection to make, or this test shows nothing
    best_step = evals[returns.index(max(returns))]["env_step"]  # the first of equal maxima: ties keep the earlier
    assert best_step < 3000, returns  # the best is not the last policy, or the test could not tell them apart
    (best,) = [r for r in records if r["kind"] == "best_eval"]
    assert (best["best_env_step"], best["best_eval_return_mean"], best["episodes"]) == (best_step, max(returns), 10)
    match = re.search(r"^best policy: env step (\d+) \(periodic evaluation (-?[\d.]+)\): return=(-?[\d.]+) ",
                      launch.stdout, re.M)
    assert match, launch.stdout
    assert (int(match[1]), float(match[2]), float(match[3])) == (
        best_step, round(max(returns), 2), round(best["return_mean"], 2))
    # One save per improvement of the running maximum, one checkpoint kept: its number counts the saves.
    improvements = sum(r > max(returns[:i], default=-math.inf) for i, r in enumerate(returns))
    assert [p.name for p in (launch.run_dir / "best_policy").glob("ckpt-*.index")] == [f"ckpt-{improvements}.index"]

    # The export is the best policy: its metadata says so, and it plays the final evaluation's 10 episodes
    # (seed 4 + 20000) exactly as the best_eval record says.
    (version_dir,) = (launch.run_dir / "saved_models" / "dqn-CartPole-v1").iterdir()
    metadata = export.read_metadata(version_dir)
    assert metadata["train_env_steps"] == best_step and metadata["checkpoint"] is None
    assert metadata["best_policy"] == {"eval_return_mean": max(returns)}
    served = serving.load(version_dir)
    replayed = evaluation.evaluate(served.policy, "CartPole-v1", 10, seed=4 + evaluation.FINAL_SEED_OFFSET)
    assert float(replayed.mean()) == pytest.approx(best["return_mean"])
    # And it is the policy that was selected: on the periodic evaluation's 5 episodes it scores max(returns).
    selection = evaluation.evaluate(served.policy, "CartPole-v1", 5, seed=4 + evaluation.PERIODIC_SEED_OFFSET)
    assert float(selection.mean()) == pytest.approx(max(returns))
    assert f"exported: {version_dir}: the best policy (env step {best_step}, return {best['return_mean']:.2f})" in (
        launch.stdout)
    # result.json describes the exported policy at its top, the last one beside it.
    result = json.loads((launch.run_dir / "result.json").read_text())
    (final,) = [r for r in records if r["kind"] == "final_eval"]
    assert (result["policy"], result["kind"], result["return_mean"]) == ("best", "best_eval", best["return_mean"])
    assert result["last"] == final and result["best"] == best and result["saved_model"] == str(version_dir)


# --- reproducibility: --seed and --deterministic ------------------------------------------------

def _records_without_timing(launch):
    assert launch.returncode == 0, launch.stderr[-3000:]
    records = [json.loads(line) for line in (launch.run_dir / "metrics.jsonl").read_text().splitlines()]
    # Only the clock may differ.
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in records]


def _newest_checkpoint_tensors(run_dir):
    """{name: raw bytes} of every tensor of the newest checkpoint: weights, optimizer slots, counters."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run_dir / "checkpoints")))
    return {name: reader.get_tensor(name).tobytes() for name in reader.get_variable_to_shape_map()
            if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}


@pytest.mark.parametrize("agent, train_steps, eval_steps", [
    ("dqn", [500, 1000, 1500, 2000], [1000, 2000]),
    ("a2c", [1000, 2000, 3000, 4000], [2000, 4000]),
    ("ppo", [1000, 2000, 3000, 4000], [2000, 4000]),
])
def test_same_seed_and_deterministic_give_identical_metrics_and_weights(launches, agent, train_steps, eval_steps):
    # The digest covers every checkpoint tensor and every metrics record, byte for byte.
    launch = _same_as_another_launch(launches, agent)
    first = _records_without_timing(launch)
    assert [r["env_step"] for r in first if r["kind"] == "train"] == train_steps
    assert [r["env_step"] for r in first if r["kind"] == "eval"] == eval_steps
    assert all(r["episodes"] > 0 and math.isfinite(r["loss"]) for r in first if r["kind"] == "train")
    assert len(_newest_checkpoint_tensors(launch.run_dir)) >= 10  # networks, optimizer slots, step counters


@pytest.fixture(scope="module")
def behaviour_record():
    """(this machine's key, its recorded {"recorded_at", "digests"} or None, the recorded trajectories and the
    commit they were recorded at), from tests/data/behaviour_digests.json (tests/behaviour_digests.py)."""
    key, data = behaviour_digests.machine_key(), behaviour_digests.recorded()
    return key, data.get("machines", {}).get(key), data.get("trajectories", {}), data.get("recorded_at")


@pytest.mark.parametrize("name", list(REPRODUCIBLE_ARGS))
def test_training_gives_the_recorded_digests(launches, behaviour_record, name):
    """On a machine with digests of its own: the same checkpoint tensors and metrics, bit for bit, as the code that
    recorded them. On any other: the recorded trajectory (metrics records, checkpoint tensor norms), integers
    exactly and floats within behaviour_digests.RTOL. A change in the numerics must be explained and re-recorded."""
    first = _same_as_another_launch(launches, name)
    digest = behaviour_digests.digest(first.run_dir)

    key, machine, trajectories, trajectories_at = behaviour_record
    record = behaviour_digests.RECORD_COMMAND
    assert name in trajectories, f"{name}: no trajectory recorded in {behaviour_digests.DIGESTS_FILE}: {record}"
    difference = behaviour_digests.trajectory_difference(behaviour_digests.trajectory(first.run_dir),
                                                         trajectories[name])
    if machine is not None and name in machine["digests"]:
        assert digest == machine["digests"][name], (
            f"{name}: the digests differ from those recorded on this machine ({key}) at {machine['recorded_at']}; "
            f"against the recorded trajectory: {difference or 'within tolerance'}. If the change of behaviour is "
            f"meant, say so in the commit and re-record on each machine type ({record}, from a clean checkout)")
        return
    tolerance = f"rtol {behaviour_digests.RTOL:g} of each field's scale, atol {behaviour_digests.ATOL:g}"
    assert difference is None, (
        f"{name}: this machine ({key}) has no digests recorded, and its run differs from the trajectory recorded "
        f"at {trajectories_at} beyond tolerance ({tolerance}): {difference}. Either the code's behaviour changed "
        f"or this machine computes differently: `python tests/behaviour_digests.py` on a recorded machine type "
        f"compares without recording. To check this machine exactly from now on: {record}, here, from a clean "
        f"checkout of the commit, and commit {behaviour_digests.DIGESTS_FILE.relative_to(REPO_ROOT)}")
    warnings.warn(f"{name}: no digests recorded for this machine ({key}): checked against the recorded "
                  f"trajectory within tolerance only; for an exact check: {record}")


# --- numeric guard ------------------------------------------------------------------------------

def test_a_diverging_run_stops_with_exit_code_3_naming_the_step_and_keeps_the_last_good_checkpoint(launches):
    launch = launches["diverging"].result()
    assert launch.returncode == 3, launch.stderr[-3000:]
    assert "Traceback" not in launch.stderr
    last = launch.stderr_lines()[-1]
    match = re.fullmatch(r"train\.py: error: training diverged: non-finite (.+) at env step (\d+) "
                         r"\(gradient step (\d+)\); stopped without saving: checkpoint 1 \(env step 500\) "
                         r"is the newest", last)
    assert match, last
    assert "Q-values" in match.group(1) and 600 < int(match.group(2)) < 1000 and int(match.group(3)) >= 2
    checkpoint_dir = launch.run_dir / "checkpoints"
    assert sorted(p.name for p in checkpoint_dir.iterdir()) == [
        "checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index", "ckpt-1.json", "ckpt-1.npz"]
    assert not (launch.run_dir / "saved_models").exists()
    assert "final evaluation" not in launch.stdout
