"""Every precision policy x XLA on/off learns CartPole, and float16's loss-scale state survives the run's checkpoint.

The run loop with A2C (tfrl.run.training_loop.train, what scripts/train.py runs) trains CartPole-v1 for 30k env steps
under each of the 6 combinations. The Keras precision policy is process-global, so the combinations run in
two fresh processes (three each, side by side on the two cores); apply() may change the policy and XLA
between runs because the device configuration stays the same. Unit tests of the float16 step (loss scaling,
overflow skips) are in test_dqn_learning.py and test_a2c_learning.py; the bitwise DQN checkpoint round trip
with a loss scale is in test_checkpoints.py. This file checks the outcome of whole runs.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
RANDOM_POLICY_RETURN = 22  # mean CartPole-v1 return of uniformly random actions
# tfrl/presets/a2c-cartpole.json cut from 200k to 30k env steps with a higher rate (1e-3 instead of 7e-4, decaying
# linearly over the 30k). Seeds 0-2 x the 6 combinations (18 runs, 20 greedy episodes each) ended at
# 145..500 on this machine; 100 leaves room for float rounding to change a run's course elsewhere.
THRESHOLD = 100
COMBINATIONS = [(policy, xla) for policy in ("float32", "mixed_bfloat16", "mixed_float16") for xla in (False, True)]

_TRAIN_COMBINATIONS = """
    import json, pathlib, sys, tempfile
    import keras, tensorflow as tf
    from tfrl.hardware import runtime as runtime_lib
    from tfrl.run import checkpoints
    from tfrl import agents
    from tfrl.run import training_loop
    from tfrl.agents.a2c.config import A2CConfig
    from tfrl.agents.a2c.learning import A2CLearner
    from tfrl.envs import EnvInfo

    config = A2CConfig(total_env_steps=30_000, num_envs=8, rollout_length=8, gamma=0.98, gae_lambda=0.8,
                       learning_rate=1e-3, lr_schedule="linear", eval_interval=0, final_eval_episodes=20,
                       log_interval=10**9, checkpoint_interval=0)  # one checkpoint, at the end
    results = []
    for policy, xla in json.loads(sys.argv[1]):
        runtime = runtime_lib.apply(runtime_lib.RuntimeOptions(mixed_precision=policy, xla=xla))
        run_dir = pathlib.Path(tempfile.mkdtemp())
        final = training_loop.train(agents.get("a2c"), config, "CartPole-v1", 1, runtime, run_dir,
                                    training_loop.LoopOptions(progress_bar=False))
        result = {"policy": policy, "xla": xla, "return_mean": final["return_mean"],
                  "global_policy": keras.mixed_precision.global_policy().name}
        # A fresh learner, restored from the run's final checkpoint, against the checkpoint file itself.
        fresh = A2CLearner(config, EnvInfo("CartPole-v1", (4,), 2), runtime)
        result["compute_dtype"] = fresh.network.layers[1].compute_dtype
        result["optimizer"] = type(fresh.optimizer).__name__
        if policy == "mixed_float16":
            reader = tf.train.load_checkpoint(str(run_dir / "checkpoints"))
            saved = {name: float(reader.get_tensor(f"optimizer/{name}/.ATTRIBUTES/VARIABLE_VALUE"))
                     for name in ("dynamic_scale", "step_counter")}
            checkpoints.Checkpointer(run_dir, fresh.checkpoint_items()).restore_latest()
            result.update(saved=saved, restored={"dynamic_scale": float(fresh.optimizer.dynamic_scale.numpy()),
                                                 "step_counter": float(fresh.optimizer.step_counter.numpy())},
                          updates=int(fresh.updates.numpy()), iterations=int(fresh.optimizer.iterations.numpy()))
        results.append(result)
    print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def runs() -> dict:
    halves = [  # the two slowest (float16 is emulated on most CPUs) in different processes
        [("float32", False), ("float32", True), ("mixed_float16", False)],
        [("mixed_bfloat16", False), ("mixed_bfloat16", True), ("mixed_float16", True)],
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    processes = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(_TRAIN_COMBINATIONS), json.dumps(half)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)
                 for half in halves]
    results = {}
    for process in processes:
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
        for result in json.loads(stdout.strip().splitlines()[-1]):
            results[(result["policy"], result["xla"])] = result
    return results


@pytest.mark.parametrize("policy, xla", COMBINATIONS, ids=[f"{p}-xla_{'on' if x else 'off'}" for p, x in COMBINATIONS])
def test_every_precision_and_xla_combination_learns_cartpole(runs, policy, xla):
    result = runs[(policy, xla)]
    assert result["global_policy"] == policy
    assert result["compute_dtype"] == {"float32": "float32", "mixed_bfloat16": "bfloat16",
                                       "mixed_float16": "float16"}[policy]
    assert result["return_mean"] >= THRESHOLD, (
        f"{policy}, XLA {xla}: greedy return {result['return_mean']} (random policy: ~{RANDOM_POLICY_RETURN})")


@pytest.mark.parametrize("xla", [False, True])
def test_float16_run_checkpoints_its_loss_scale_and_a_fresh_learner_restores_it(runs, xla):
    result = runs[("mixed_float16", xla)]
    assert result["optimizer"] == "LossScaleOptimizer"
    assert result["restored"] == result["saved"]
    # 30k env steps / (8 envs x 8 steps) = 469 updates (rounded up to whole rollouts): all restored.
    assert result["updates"] == 469
    # The optimizer counts only finite steps: each overflow skips one and halves the scale (from 2**15).
    skipped = 469 - result["iterations"]
    assert result["saved"]["dynamic_scale"] == 2.0**15 / 2**skipped
    assert 0 <= result["saved"]["step_counter"] <= result["iterations"]
