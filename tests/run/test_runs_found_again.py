"""Runs you can find again: the same call continues an interrupted run, a finished run is extended with more env
steps, a new run starts from another run's weights, and a run, its evaluation and its export agree on which
policy is "the" policy. Also the Python API's answers to bad arguments and to Ctrl-C.

In-process through tfrl.train and tfrl.run.launch (the CLI's path), on the Corridor of tests/custom_envs.py.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pytest

import tfrl
from tfrl.errors import UsageError
from tfrl.run import checkpoints, launch, run_finder, runs

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests"))
import custom_envs  # noqa: E402  (registers Corridor-v0)

ENV = "custom_envs:Corridor-v0"
DQN = {"total_env_steps": 1000, "hidden_sizes": "16", "learning_starts": 200, "batch_size": 32,
       "gradient_steps_per_train": 1, "target_update_period_env_steps": 100, "learning_rate": 1e-3,
       "eval_interval": 0, "final_eval_episodes": 3, "checkpoint_interval": 500, "log_interval": 500}
DQN_LOGGED = {**DQN, "log_interval": 100}
BATCH = np.eye(custom_envs.LENGTH, dtype=np.float32)


def _stopped_run(hp, seed=0, **request):
    """A run of tfrl.run.launch stopped (as by Ctrl-C) at its first chance after env step 400: it has a checkpoint."""
    prepared = launch.prepare(launch.TrainRequest(agent="dqn", env=ENV, preset="none", hp=hp, seed=seed, **request))
    steps = []

    def stop_after_400() -> bool:
        steps.append(1)
        return len(steps) > 400

    result = launch.execute(prepared, stop_requested=stop_after_400)
    assert result.record["kind"] == "stopped"
    return result.run_dir


def test_the_same_call_continues_the_interrupted_run_and_new_run_starts_another(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    interrupted = _stopped_run(DQN_LOGGED)
    assert interrupted.parent == pathlib.Path("runs") and not (interrupted / "result.json").exists()
    other_seed = _stopped_run(DQN_LOGGED, seed=1)  # another command's interrupted run: never taken for this one
    run = tfrl.train("dqn", ENV, preset="none", hp=DQN_LOGGED, verbose=0)
    assert run.run_dir == interrupted and run.complete
    records = [json.loads(line) for line in (interrupted / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_step"] for r in records if r["kind"] == "resume"] == [400]  # continued from its checkpoint
    # Complete now: the same call starts a new run; so does new_run=True while a run of it is interrupted.
    again = tfrl.train("dqn", ENV, preset="none", hp=DQN_LOGGED, verbose=0)
    assert again.run_dir not in (interrupted, other_seed) and again.complete
    fresh = _stopped_run(DQN_LOGGED)
    new = tfrl.train("dqn", ENV, preset="none", hp=DQN_LOGGED, verbose=0, new_run=True)
    assert new.run_dir not in (fresh, interrupted, again.run_dir)
    # Other settings are another command; a run in use by another process is not interrupted.
    runs_root, prefix = pathlib.Path("runs"), "dqn-custom_envs-Corridor-v0-s0"
    assert run_finder.find_interrupted(runs_root, prefix, _record(DQN_LOGGED)) == fresh
    changed = {**DQN_LOGGED, "learning_rate": 2e-3}
    assert run_finder.find_interrupted(runs_root, prefix, _record(changed)) is None
    lock = runs.lock_for_training(fresh)
    try:
        assert run_finder.in_use(fresh)
        assert run_finder.find_interrupted(runs_root, prefix, _record(DQN_LOGGED)) is None
    finally:
        lock.close()


def _record(hp):
    return launch.prepare(launch.TrainRequest(agent="dqn", env=ENV, preset="none", hp=hp,
                                              run_dir=pathlib.Path("unused"))).record


def test_a_finished_run_is_extended_by_a_larger_total_and_its_wall_time_adds_up(tmp_path):
    run_dir = tmp_path / "run"
    first = tfrl.train("dqn", ENV, preset="none", hp=DQN, run_dir=run_dir, verbose=0)
    assert first.complete and first.saved_model.name == "1"
    with pytest.raises(UsageError, match=r"total_env_steps=800: the run in .* has trained 1000 env steps already"):
        tfrl.train("dqn", ENV, preset="none", hp={**DQN, "total_env_steps": 800}, run_dir=run_dir, verbose=0)
    checkpointed_at, loop_state = checkpoints.Checkpointer(run_dir, {}).newest_loop_state()
    longer = tfrl.train("dqn", ENV, preset="none", hp={**DQN, "total_env_steps": 1200}, run_dir=run_dir, verbose=0)
    assert longer.complete and longer.result["env_step"] == 1200 and longer.saved_model.name == "2"
    assert json.loads((run_dir / "config.json").read_text())["hparams"]["total_env_steps"] == 1200
    assert json.loads((run_dir / "result.json").read_text())["env_step"] == 1200
    # wall_time_s counts on from the checkpoint the extension resumed from (the first 1000 env steps' training
    # time); the first process's final evaluation came after that checkpoint, so first.result's time may be more
    # (a loaded CI machine paused it for 0.5 s once).
    assert checkpointed_at == 1000 and 0 < loop_state["wall_time_s"] <= first.result["wall_time_s"]
    assert longer.result["wall_time_s"] > loop_state["wall_time_s"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {"kind": "resume", "env_step": 1000} in records  # resumed, not started over
    # Other changes than the total are still another run.
    with pytest.raises(UsageError, match="holds a run with a different config"):
        tfrl.train("dqn", ENV, preset="none", hp={**DQN, "total_env_steps": 1400, "batch_size": 16},
                   run_dir=run_dir, verbose=0)


def test_the_cli_extends_a_finished_run_with_resume_and_a_larger_total(tmp_path):
    run_dir = tmp_path / "run"
    tfrl.train("dqn", ENV, preset="none", hp=DQN, run_dir=run_dir, verbose=0)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "tests"))
    env.pop("KERAS_BACKEND", None)
    completed = subprocess.run([sys.executable, "-m", "tfrl", "train", "--resume", f"--run_dir={run_dir}",
                                "--hp=total_env_steps=1500"], capture_output=True, text=True, env=env, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "extending the run to total_env_steps=1500" in completed.stderr
    assert "env_steps=1500" in completed.stdout and (run_dir / "saved_models" / "dqn-custom_envs-Corridor-v0" / "2").is_dir()


def test_a_new_run_starts_from_a_run_dirs_or_a_saved_models_weights(tmp_path):
    source = tfrl.train("dqn", ENV, preset="none", hp=DQN, run_dir=tmp_path / "source", verbose=0)
    expected = tfrl.load_policy(source.run_dir, checkpoint="last").outputs(BATCH)["q_values"]
    # No gradient step in the new runs (they end before learning_starts): their policy is the loaded one.
    untrained = {**DQN, "total_env_steps": 100, "checkpoint_interval": 0}
    from_run = tfrl.train("dqn", ENV, preset="none", hp=untrained, run_dir=tmp_path / "a", verbose=0,
                          init_from=source.run_dir)
    np.testing.assert_array_equal(tfrl.load_policy(from_run.run_dir).outputs(BATCH)["q_values"], expected)
    assert json.loads((tmp_path / "a" / "config.json").read_text())["init_from"] == str(source.run_dir.resolve())
    exported = tfrl.load_policy(source.saved_model).outputs(BATCH)["q_values"]
    from_export = tfrl.train("dqn", ENV, preset="none", hp=untrained, run_dir=tmp_path / "b", verbose=0,
                             init_from=source.saved_model.parent)  # a model dir: its highest version
    np.testing.assert_allclose(tfrl.load_policy(from_export.run_dir).outputs(BATCH)["q_values"], exported,
                               rtol=1e-6)
    # The target network follows the loaded online network.
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(tmp_path / "b" / "checkpoints" / "ckpt-1"))
    online = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if n.startswith("online/")}
    for name, value in online.items():
        np.testing.assert_array_equal(reader.get_tensor(name.replace("online/", "target/", 1)), value)
    fresh = tfrl.train("dqn", ENV, preset="none", hp=untrained, run_dir=tmp_path / "c", verbose=0)
    assert not np.allclose(tfrl.load_policy(fresh.run_dir).outputs(BATCH)["q_values"], expected)


def test_init_from_refuses_other_networks_agents_or_spaces_before_writing(tmp_path, monkeypatch):
    source = tfrl.train("dqn", ENV, preset="none", hp=DQN, run_dir=tmp_path / "source", verbose=0)
    monkeypatch.chdir(tmp_path)
    cases = [
        ({"hp": {**DQN, "hidden_sizes": "32"}}, "has hidden_sizes=[16], this run [32]: the networks differ"),
        ({"agent": "ppo", "hp": {}}, "is a dqn policy, not ppo"),
        ({"env": "CartPole-v1"}, "takes observations ((6,), 'float32') and actions 2; this run's env has ((4,)"),
        ({"init_from": tmp_path / "nowhere"}, "does not exist"),
        ({"init_from": tmp_path}, "is neither a run directory (config.json) nor a SavedModel"),
    ]
    for change, message in cases:
        arguments = {"agent": "dqn", "env": ENV, "preset": "none", "hp": DQN, "init_from": source.run_dir,
                     "verbose": 0, **change}
        with pytest.raises(UsageError) as raised:
            tfrl.train(arguments.pop("agent"), arguments.pop("env"), **arguments)
        assert message in str(raised.value), raised.value
    assert not (tmp_path / "runs").exists()


def test_the_run_dir_its_evaluation_and_its_export_agree_on_the_kept_best_policy(tmp_path):
    hp = {**DQN, "total_env_steps": 1500, "keep_best_policy": True, "eval_interval": 300, "eval_episodes": 2}
    run = tfrl.train("dqn", ENV, preset="none", hp=hp, run_dir=tmp_path / "run", verbose=0)
    best = run.result["best"]
    metadata = json.loads((run.saved_model / "assets.extra" / "tfrl_metadata.json").read_text())
    assert metadata["train_env_steps"] == best["best_env_step"] and metadata["best_policy"] is not None
    default = tfrl.load_policy(run.run_dir)
    assert "best policy" in default.source
    np.testing.assert_allclose(default.outputs(BATCH)["q_values"],
                               tfrl.load_policy(run.saved_model).outputs(BATCH)["q_values"], rtol=1e-6)
    assert runs.load_policy(run.run_dir).env_step == best["best_env_step"]
    assert runs.load_policy(run.run_dir, "last").env_step == 1500
    assert runs.load_policy(run.run_dir, "2").checkpoint == 2
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "tests"))
    env.pop("KERAS_BACKEND", None)
    evaluated = subprocess.run([sys.executable, "-m", "tfrl", "evaluate", f"--run_dir={run.run_dir}", "--episodes=2"],
                               capture_output=True, text=True, env=env, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert evaluated.stdout.startswith(f"the best policy of {run.run_dir} (trained {best['best_env_step']} env steps)")
    # A run without keep_best_policy: its policy is its newest checkpoint's.
    plain = tfrl.train("dqn", ENV, preset="none", hp=DQN, run_dir=tmp_path / "plain", verbose=0)
    assert runs.load_policy(plain.run_dir).checkpoint == runs.load_policy(plain.run_dir, "last").checkpoint


@pytest.mark.parametrize("argument, value, message", [
    ("seed", True, "seed must be an integer"),
    ("seed", "0", "seed must be an integer"),
    ("keep_checkpoints", 2.5, "keep_checkpoints must be an integer"),
    ("callbacks", 5, "callbacks must be a list of callbacks"),
    ("callbacks", [print], "callback <built-in function print> has no on_log and on_eval methods"),
    ("hp", "lr=1", "hp must be a dict"),
    ("hp", {1: 2}, "the keys of hp must be strings"),
    ("run_dir", 123, "run_dir must be a path"),
    ("runtime", "xla", "runtime must be tfrl.RuntimeOptions"),
    ("env_kwargs", [1], "env_kwargs must be a dict"),
    ("preset", 5, "preset must be a string"),
    ("verbose", 3, "verbose must be 0, 1 or 2"),
    ("export", "yes", "export must be True or False"),
])
def test_the_python_api_refuses_bad_types_before_writing_anything(tmp_path, monkeypatch, argument, value, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=f"^tfrl.train: {message}"):
        tfrl.train("dqn", ENV, **{"preset": "none", "hp": DQN, "verbose": 0, argument: value})
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError, match="tfrl.load_policy: path must be a path"):
        tfrl.load_policy(123)


def test_a_lambda_env_gets_a_readable_model_name_and_model_name_overrides_it(tmp_path):
    import gymnasium as gym

    hp = {"total_env_steps": 256, "num_envs": 2, "rollout_length": 64, "batch_size": 64, "eval_interval": 0,
          "final_eval_episodes": 1}
    run = tfrl.train("ppo", lambda: gym.make("CartPole-v1"), preset="none", hp=hp, run_dir=tmp_path / "a", verbose=0)
    assert run.saved_model.parent.name == "ppo-CartPole-v1"
    named = tfrl.train("ppo", lambda: gym.make("CartPole-v1"), preset="none", hp=hp, run_dir=tmp_path / "b",
                       verbose=0, model_name="balance")
    assert named.saved_model.parent.name == "balance" and named.export().parent.name == "balance"


def test_a_concurrent_finish_is_seen_under_the_lock_no_second_evaluation_or_export(tmp_path):
    request = launch.TrainRequest(agent="dqn", env=ENV, preset="none", hp=DQN, run_dir=tmp_path / "run")
    late = launch.prepare(request)  # prepared while the run was not complete yet
    tfrl.train("dqn", ENV, preset="none", hp=DQN, run_dir=tmp_path / "run", verbose=0)
    result = launch.execute(late)
    assert result.already_complete
    assert sorted(p.name for p in (tmp_path / "run" / "saved_models" / "dqn-custom_envs-Corridor-v0").iterdir()) == ["1"]
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert kinds.count("final_eval") == 1


def test_a_background_trainer_leaves_no_thread_behind():
    before = threading.active_count()
    hp = {"total_env_steps": 600, "learning_starts": 200, "batch_size": 32, "hidden_sizes": "16",
          "train_in_background": True, "eval_interval": 0, "final_eval_episodes": 1, "checkpoint_interval": 0}
    with tempfile.TemporaryDirectory() as directory:
        tfrl.train("sac", "Pendulum-v1", preset="none", hp=hp, run_dir=pathlib.Path(directory) / "run",
                   export=False, verbose=0)
    assert threading.active_count() == before, [t.name for t in threading.enumerate()]


CTRL_C_SCRIPT = """
import os, pathlib, signal, sys
sys.path.insert(0, {tests!r})
import tfrl

# A terminal's Ctrl-C, whatever pytest was started under (a shell's background job inherits SIGINT ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)

class CtrlC(tfrl.Callback):
    def on_log(self, record):
        if record["env_step"] == 500:
            os.kill(os.getpid(), signal.SIGINT)
        return False

hp = {hp!r}
try:
    tfrl.train("dqn", "custom_envs:Corridor-v0", preset="none", hp=hp, run_dir="run", callbacks=[CtrlC()], verbose=0)
except KeyboardInterrupt:
    print("interrupted", sorted(p.name for p in pathlib.Path("run/checkpoints").glob("*.json")))
run = tfrl.train("dqn", "custom_envs:Corridor-v0", preset="none", hp=hp, run_dir="run", verbose=0)
print("finished", run.result["env_step"])
"""


def test_ctrl_c_in_python_saves_a_checkpoint_then_interrupts_and_the_same_call_finishes(tmp_path):
    hp = {**DQN, "checkpoint_interval": 0, "log_interval": 500}
    script = CTRL_C_SCRIPT.format(tests=str(REPO_ROOT / "tests"), hp=hp)
    env = {key: value for key, value in os.environ.items() if key != "KERAS_BACKEND"}
    completed = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                               env=env, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.splitlines() == ["interrupted ['ckpt-1.json']", "finished 1000"], completed.stdout


def test_a_finished_keep_best_run_is_complete_when_its_command_runs_again(tmp_path):
    # result.json's top level is then the best policy's evaluation ("kind": "best_eval"): still a complete run.
    hp = {"total_env_steps": 1200, "learning_starts": 200, "hidden_sizes": [16], "eval_interval": 400,
          "eval_episodes": 2, "final_eval_episodes": 2, "keep_best_policy": True}
    first = tfrl.train("dqn", "CartPole-v1", preset="none", hp=hp, run_dir=tmp_path / "run", verbose=0)
    assert first.complete and first.result["policy"] == "best" and first.result["kind"] == "best_eval"
    again = tfrl.train("dqn", "CartPole-v1", preset="none", hp=hp, run_dir=tmp_path / "run", verbose=0)
    assert again.result == first.result  # read back, nothing evaluated or exported again
    assert sorted(p.name for p in (tmp_path / "run" / "saved_models" / "dqn-CartPole-v1").iterdir()) == ["1"]
