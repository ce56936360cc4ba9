"""tfrl tune (tfrl/tuning): a study in SQLite through the command, continued; a SIGKILLed trial failed at the next
start; two processes sharing a study; the written preset trains; pruning ends a run cleanly; bad input is one
line, exit code 2 and nothing written. Tiny PPO CartPole trials (about a second each)."""

import contextlib
import json
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import time

import optuna
import pytest

from tfrl import agents, config as config_lib
from tfrl.agents.ppo.config import PPOConfig
from tfrl.errors import UsageError
from tfrl.tuning import spaces, trials

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# Sampled: learning rate, schedule, gamma, GAE lambda, entropy and value coefficients, gradient clip, activation,
# clip range. Fixed: what makes a trial take long (or a sampled batch not divide the rollout).
TINY = {"total_env_steps": "1024", "num_envs": "4", "rollout_length": "32", "batch_size": "64", "n_epochs": "2",
        "hidden_sizes": "16", "eval_interval": "256", "eval_episodes": "2", "final_eval_episodes": "2",
        "checkpoint_interval": "0"}


def _tfrl(*args, cwd, wait=True):
    env = {key: value for key, value in os.environ.items() if key != "KERAS_BACKEND"}
    command = [sys.executable, "-m", "tfrl", *args]
    if not wait:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _tune(*args, cwd, wait=True, **hp):
    fixed = [f"--hp={key}={value}" for key, value in {**TINY, **hp}.items()]
    return _tfrl("tune", "--agent=ppo", "--env=CartPole-v1", "--storage=sqlite:///study.db", *fixed, *args,
                 cwd=cwd, wait=wait)


def _states(cwd: pathlib.Path, study_name="ppo-CartPole-v1") -> dict[int, str]:
    study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{cwd / 'study.db'}")
    return {trial.number: trial.state.name for trial in study.get_trials(deepcopy=False)}


def test_a_study_of_three_trials_continues_to_five_and_its_preset_trains(tmp_path):
    first = _tune("--trials=3", "--out_preset=best.json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert _states(tmp_path) == {0: "COMPLETE", 1: "COMPLETE", 2: "COMPLETE"}
    assert "best trials (return, higher is better):" in first.stdout and "too few" in first.stdout
    assert (tmp_path / "runs/tune-ppo-CartPole-v1/optimization_history.png").stat().st_size > 0
    assert {path.name for path in (tmp_path / "runs/tune-ppo-CartPole-v1").glob("trial-*")} == {
        "trial-0-s0", "trial-1-s1", "trial-2-s2"}

    again = _tune("--trials=5", "--out_preset=best.json", cwd=tmp_path)  # the same command, more trials
    assert again.returncode == 0, again.stderr[-3000:]
    assert _states(tmp_path) == {n: "COMPLETE" for n in range(5)}
    assert [line.split()[1] for line in again.stdout.splitlines() if line.startswith("trial ")] == ["3", "4"]
    assert "parameter importances (optuna.importance): " in again.stdout

    study = optuna.load_study(study_name="ppo-CartPole-v1", storage=f"sqlite:///{tmp_path / 'study.db'}")
    preset = json.loads((tmp_path / "best.json").read_text())
    assert preset["agent"] == "ppo" and preset["env_ids"] == ["CartPole-v1"]
    assert f"trial {study.best_trial.number} of 5 finished" in preset["description"]
    assert preset["hparams"]["learning_rate"] == study.best_trial.params["learning_rate"]
    assert preset["hparams"]["total_env_steps"] == 1024 and preset["hparams"]["hidden_sizes"] == [16]
    assert preset["hparams"]["n_epochs"] == 2  # fixed; the base preset's own keys are kept too:
    assert preset["hparams"]["clip_range_schedule"] == "linear"
    # The best trial's run trained with exactly the preset's values.
    (run_dir,) = study.best_trial.user_attrs["run_dirs"]
    trained = json.loads((tmp_path / run_dir / "config.json").read_text())["hparams"]
    assert {key: trained[key] for key in preset["hparams"]} == preset["hparams"]

    train = _tfrl("train", "--agent=ppo", "--env=CartPole-v1", "--preset=best.json", "--run_dir=again",
                  "--hp=total_env_steps=256", cwd=tmp_path)
    assert train.returncode == 0, train.stderr[-3000:]
    config = json.loads((tmp_path / "again" / "config.json").read_text())
    assert config["preset"] == "best" and config["hparams"]["gamma"] == preset["hparams"]["gamma"]


def test_a_trial_killed_with_sigkill_is_failed_at_the_next_start_and_retried(tmp_path):
    # The trial is RUNNING from before TensorFlow loads in it (seconds) to its end.
    process = _tune("--trials=1", "--heartbeat_s=1", cwd=tmp_path, wait=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if _running_with_a_heartbeat(tmp_path):  # a trial a kill finds (the first heartbeat comes at its start)
            break
        time.sleep(0.2)
    assert process.poll() is None, process.communicate()[1][-3000:]
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert _states(tmp_path) == {0: "RUNNING"}
    time.sleep(2.5)  # past the grace period (twice the heartbeat)

    rerun = _tune("--trials=1", "--heartbeat_s=1", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _states(tmp_path) == {0: "FAIL", 1: "COMPLETE"}
    study = optuna.load_study(study_name="ppo-CartPole-v1", storage=f"sqlite:///{tmp_path / 'study.db'}")
    failed, retried = study.get_trials(deepcopy=False)
    assert retried.params == failed.params and retried.system_attrs["failed_trial"] == 0
    with contextlib.closing(sqlite3.connect(tmp_path / "study.db")) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def _running_with_a_heartbeat(cwd: pathlib.Path) -> bool:
    """A trial is running and has sent a heartbeat; read only (optuna.load_study would create the tables, racing
    the command that does), False while the database has none yet."""
    # ... and has drawn all its parameters: run_dirs is set after the draw, before training (a kill during the
    # draw leaves a trial with fewer parameters than its retry).
    query = ("SELECT COUNT(*) FROM trials JOIN trial_heartbeats USING (trial_id) WHERE state = 'RUNNING' AND EXISTS "
             "(SELECT 1 FROM trial_user_attributes AS a WHERE a.trial_id = trials.trial_id AND a.key = 'run_dirs')")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{cwd / 'study.db'}?mode=ro", uri=True)) as connection:
            return connection.execute(query).fetchone()[0] > 0
    except sqlite3.Error:
        return False


def test_two_processes_share_one_study(tmp_path):
    # --jobs=2: a second process of the same command, started once this one has opened the study, asks for a
    # trial while this one trains its first (TensorFlow's import alone takes longer than its start).
    completed = _tune("--trials=2", "--jobs=2", cwd=tmp_path, total_env_steps=2048)
    assert completed.returncode == 0, completed.stderr[-3000:]
    study = optuna.load_study(study_name="ppo-CartPole-v1", storage=f"sqlite:///{tmp_path / 'study.db'}")
    finished = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    assert len(finished) in (2, 3)  # both processes may ask for the last trial at the same moment
    assert len({trial.user_attrs["process"] for trial in finished}) == 2
    numbers = [trial.number for trial in finished]
    assert sorted(numbers) == list(range(len(numbers)))  # each trial once: no number run twice


def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path):
    (tmp_path / "typo.json").write_text('{"lerning_rate": {"type": "float", "low": 1e-4, "high": 1e-3}}')
    (tmp_path / "nan.json").write_text('{"gamma": {"type": "float", "low": 0.9, "high": NaN}}')
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    other = optuna.create_study(storage=f"sqlite:///{tmp_path / 'taken.db'}", study_name="taken")
    other.set_user_attr("agent", "dqn")
    other.set_user_attr("env", "CartPole-v1")
    (tmp_path / "runs" / "tune-ppo-CartPole-v1" / "trial-0-s0").mkdir(parents=True)  # of a study since deleted
    before = {path.name: path.stat().st_mtime_ns for path in tmp_path.iterdir()}
    cases = {
        "--trials=0": "--trials must be >= 1",
        "--trials=2 --space=typo.json": "unknown hyperparameter 'lerning_rate' for PPOConfig; did you mean learning_rate",
        "--trials=2 --space=nan.json": "NaN is not a number JSON allows",
        "--trials=2 --storage=sqlite:///no/such/dir/x.db": "cannot open it",
        "--trials=2 --storage=sqlite:///taken.db --study_name=taken": "tunes --agent=dqn --env=CartPole-v1, not "
                                                                       "--agent=ppo",
        "--trials=2 --timeout_s=nan": "--timeout_s must be a number of seconds > 0",
        "--trials=2 --hp=learning_rate=nan": "not a finite number",
        "--trials=2 --hp=n_epochs=0": "n_epochs must be > 0",
        "--trials=2": "holds the trials of an earlier study",  # tune.db would be new: it is not left behind
    }
    for args, message in cases.items():
        completed = _tfrl("tune", "--agent=ppo", "--env=CartPole-v1", *args.split(), cwd=tmp_path)
        lines = completed.stderr.strip().splitlines()
        assert completed.returncode == 2 and len(lines) == 1 and message in lines[0], (args, completed.stderr)
        assert {path.name: path.stat().st_mtime_ns for path in tmp_path.iterdir()} == before, args


def test_a_pruned_trial_stops_at_its_evaluation_and_keeps_no_checkpoint(tmp_path):
    class PruningTrial:  # the optuna.Trial methods a trial uses; its pruner prunes at the first evaluation
        number, user_attrs = 7, {}

        def suggest_float(self, name, low, high, step=None, log=False):
            return low

        def suggest_categorical(self, name, choices):
            return choices[0]

        def report(self, value, step):
            self.reported = (value, step)

        def should_prune(self):
            return True

        def set_user_attr(self, key, value):
            self.user_attrs[key] = value

    hp = {**TINY, "checkpoint_interval": "128"}  # a checkpoint (after the first rollout) before the evaluation that prunes
    base = config_lib.apply_overrides(PPOConfig(), hp, "--hp")
    space = {"learning_rate": {"type": "float", "low": 1e-3, "high": 1e-2}}
    setup = trials.Setup(agent="ppo", env="CartPole-v1", env_kwargs={}, preset="ppo-cartpole", fixed=hp,
                         base_config=base, space=space, trials_dir=tmp_path)
    trial = PruningTrial()
    with pytest.raises(optuna.TrialPruned):
        trials.objective(setup)(trial)
    run_dir = tmp_path / "trial-7-s7"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "eval" and trial.reported == (records[-1]["return_mean"], 256)
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "result.json").exists()
    assert trial.user_attrs["pruned_because"].startswith("median pruner at env step 256")


def test_spaces_are_checked_laid_over_and_fixed_values_left_out():
    overlay = {"n_steps": {"type": "int", "low": 8, "high": 64, "log": True}, "clip_range": None}
    space = spaces.resolve("ppo", PPOConfig, overlay, fixed={"gamma": "0.99"})
    assert space["rollout_length"] == overlay["n_steps"]  # the old name read as the current one
    assert "clip_range" not in space and "gamma" not in space and "learning_rate" in space
    for agent in ("dqn", "a2c", "sac", "td3"):  # every entry of every built-in space is valid
        assert spaces.resolve(agent, agents.get(agent).config_cls, None, {}) == dict(agents.get(agent).spec.search_space)
    bad = {"learning_rate": {"type": "float", "low": 0.0, "high": 1e-3, "log": True}}
    with pytest.raises(UsageError, match="a log range needs \"low\" > 0"):
        spaces.resolve("ppo", PPOConfig, bad, {})
    with pytest.raises(UsageError, match="choice 'fast' .*|'fast' is not a valid"):
        spaces.resolve("ppo", PPOConfig, {"n_epochs": {"type": "categorical", "choices": ["fast"]}}, {})
    with pytest.raises(UsageError, match="nothing to sample"):
        spaces.resolve("ppo", PPOConfig, {name: None for name in agents.get("ppo").spec.search_space}, {})


def test_without_storage_the_study_and_its_preset_go_to_the_trials_folder(tmp_path):
    fixed = [f"--hp={key}={value}" for key, value in TINY.items()]
    completed = _tfrl("tune", "--agent=ppo", "--env=CartPole-v1", "--trials=1", *fixed, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    folder = tmp_path / "runs" / "tune-ppo-CartPole-v1"
    assert [path.name for path in tmp_path.iterdir()] == ["runs"]  # no tune.db or best.json in the working dir
    assert {"study.db", "best-preset.json"} <= {path.name for path in folder.iterdir()}
    assert f"study: ppo-CartPole-v1 in sqlite:///{pathlib.Path('runs/tune-ppo-CartPole-v1/study.db')}" in (
        completed.stdout)
    assert len(optuna.load_study(study_name="ppo-CartPole-v1", storage=f"sqlite:///{folder / 'study.db'}").trials) == 1
