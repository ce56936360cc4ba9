"""The Python API (tfrl.train, tfrl.load_policy, callbacks), in-process: the README's example as written, a
factory env, an early stop, and the policies it loads.

These tests apply the default runtime options (tfrl.hardware.runtime.apply): CPU, float32, as the rest of the suite.
"""

import json
import pathlib
import re
import sys

import numpy as np
import pytest

import tfrl
from tfrl.errors import UsageError

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests"))
import custom_envs  # noqa: E402  (registers Corridor-v0)

TINY_PPO = {"total_env_steps": 6144, "num_envs": 4, "rollout_length": 64, "batch_size": 64, "n_epochs": 4,
            "hidden_sizes": "32", "learning_rate": 3e-3, "eval_interval": 1024, "eval_episodes": 2,
            "final_eval_episodes": 5, "checkpoint_interval": 0, "log_interval": 1024}


def test_the_readme_python_example_runs_as_written(tmp_path, monkeypatch):
    readme = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"<!-- readme-python-example start -->\n```python\n(.*?)```\n<!-- readme-python-example end -->",
                      readme, re.S)
    assert block, "README.md lost its Python example markers"
    monkeypatch.chdir(tmp_path)  # its run_dir is relative
    printed = []
    monkeypatch.setattr("builtins.print", lambda *args: printed.append(args))
    namespace = {}
    exec(compile(block.group(1), "README.md", "exec"), namespace)
    run, policy = namespace["run"], namespace["policy"]
    assert run.complete and run.run_dir == pathlib.Path("runs/ppo-cartpole-py")
    assert (tmp_path / "runs/ppo-cartpole-py/result.json").is_file()
    assert printed[0] == (run.result["return_mean"],) and run.result["episodes"] == 100
    assert run.result["return_mean"] > 100  # 20k env steps of the ppo-cartpole preset; random play scores ~22
    action = printed[1][0]
    assert np.ndim(action) == 0 and action in (0, 1)  # one observation, one action
    assert policy([[0.0, 0.1, 0.0, -0.1]] * 3).shape == (3,)


@pytest.mark.slow
def test_a_factory_env_is_learned_and_a_callback_ends_training_early(tmp_path):
    made = []

    def make_corridor():
        made.append(1)
        return custom_envs.Corridor()

    run = tfrl.train("ppo", make_corridor, preset="none", hp=TINY_PPO, run_dir=tmp_path / "run", seed=0,
                     callbacks=[tfrl.StopOnReturn(custom_envs.OPTIMAL_RETURN)])
    assert run.result["stopped_early_by"] == f"StopOnReturn({custom_envs.OPTIMAL_RETURN:g})"
    assert run.result["env_step"] < TINY_PPO["total_env_steps"]
    assert run.result["return_mean"] == pytest.approx(custom_envs.OPTIMAL_RETURN)  # every greedy episode is optimal
    assert len(made) > 4  # a factory, called per copy: vector envs, evaluation
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["env_id"].endswith("make_corridor")
    assert config["env_info"]["obs_shape"] == [custom_envs.LENGTH]
    # The run is complete: the same call does nothing more, and says so through the same result.
    again = tfrl.train("ppo", make_corridor, preset="none", hp=TINY_PPO, run_dir=tmp_path / "run", seed=0)
    assert again.result == {**run.result, "saved_model": str(run.saved_model)}


def test_policies_load_from_a_run_dir_a_version_dir_and_a_model_dir(tmp_path):
    run = tfrl.train("dqn", "custom_envs:Corridor-v0", preset="none", run_dir=tmp_path / "run", seed=1, hp={
        "total_env_steps": 3000, "hidden_sizes": "32", "learning_starts": 200, "batch_size": 32,
        "gradient_steps_per_train": 1, "target_update_period_env_steps": 100, "learning_rate": 1e-3,
        "eval_interval": 0, "final_eval_episodes": 5, "checkpoint_interval": 1000, "log_interval": 1000})
    assert run.result["return_mean"] == pytest.approx(custom_envs.OPTIMAL_RETURN)
    start = np.eye(custom_envs.LENGTH, dtype=np.float32)[0]
    from_run = tfrl.load_policy(run.run_dir)
    from_version = tfrl.load_policy(run.saved_model)
    from_model = tfrl.load_policy(run.saved_model.parent)
    batch = np.eye(custom_envs.LENGTH, dtype=np.float32)
    for policy in (from_run, from_version, from_model):
        assert policy(start) == 1  # right, towards the goal
        np.testing.assert_array_equal(policy(batch), from_run(batch))
        np.testing.assert_allclose(policy.outputs(batch)["q_values"], from_run.outputs(batch)["q_values"],
                                   rtol=1e-6)
    assert from_version.metadata["env_id"] == "custom_envs:Corridor-v0"
    older = tfrl.load_policy(run.run_dir, checkpoint=2)  # env step 2000
    assert older.outputs(batch)["q_values"].shape == (custom_envs.LENGTH, 2)
    with pytest.raises(UsageError, match=r"takes observations of shape \(6,\) \(or a batch \[N, \*\(6,\)\]\), got \(5,\)"):
        from_run(np.zeros(5))
    assert float(run.evaluate(3).mean()) == pytest.approx(custom_envs.OPTIMAL_RETURN)
    second = run.export(tmp_path / "models", "corridor")
    assert second == tmp_path / "models" / "corridor" / "1"


def test_bad_input_raises_a_usage_error_and_writes_nothing(tmp_path):
    with pytest.raises(UsageError, match="unknown agent 'ddpg'"):
        tfrl.train("ddpg", "CartPole-v1", run_dir=tmp_path / "a")
    with pytest.raises(UsageError, match="unknown hyperparameter 'lerning_rate' for DQNConfig; did you mean learning_rate"):
        tfrl.train("dqn", "CartPole-v1", hp={"lerning_rate": 1e-3}, run_dir=tmp_path / "b")
    with pytest.raises(UsageError, match="returned int, not a gymnasium.Env"):
        tfrl.train("dqn", lambda: 3, run_dir=tmp_path / "c")
    with pytest.raises(UsageError, match="entry 'name' has space Text"):
        tfrl.train("ppo", custom_envs.TextDictCorridor, run_dir=tmp_path / "d")
    import gymnasium as gym

    # A factory's screen render mode: refused before the env's first reset, which aborted the process (SIGABRT)
    # on a machine without a display.
    with pytest.raises(UsageError, match="makes envs with render_mode='human', which would open a window"):
        tfrl.train("dqn", lambda: gym.make("CartPole-v1", render_mode="human"), run_dir=tmp_path / "e")
    assert list(tmp_path.iterdir()) == []
