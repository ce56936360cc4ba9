"""XLA-compiled train steps: they run where their variables live, and they compute what the uncompiled steps do.

In one fresh process with two logical CPUs and --device=cpu:1, each agent's learner is built twice from the same
seed, once without XLA and once with it, and trains one call on the same inputs. CPU:0 stands for the GPU of a
machine that has one: TF places an op without a device scope on the first device, and a compiled function placed
there cannot reach variables on CPU:1 (it raised "Trying to access resource ... located in device CPU:1 from
device CPU:0" before the compiled call was wrapped in the variables' device; --device=cpu on a GPU machine raised
the same with GPU:0). Then the outputs are compared: XLA may fuse and reorder float32 sums, nothing more.
"""

import pytest

from fresh_process import run_json_script

# One train call from the same weights on the same inputs, measured here: losses within 1.3e-7 relative (PPO's
# policy loss, a mean of terms that nearly cancel, 8.7e-6, hence an absolute 1e-6 beside), weights within
# 1.2e-7. XLA computing something else (another batch, another formula) moves them by 1e-3 or more.
LOSS_RTOL, LOSS_ATOL = 1e-5, 1e-6
WEIGHTS_ATOL = 1e-5

_SCRIPT = """
import dataclasses, json
import keras, numpy as np, tensorflow as tf
from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.a2c.learning import A2CLearner
from tfrl.agents.actor_critic.rollout import Rollout
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, ReplayBatch
from tfrl.agents.ppo.config import PPOConfig
from tfrl.agents.ppo.learning import PPOLearner
from tfrl.agents.sac.config import SACConfig
from tfrl.agents.sac.learning import SACLearner
from tfrl.agents.td3.config import TD3Config
from tfrl.agents.td3.learning import TD3Learner
from tfrl.envs import EnvInfo
from tfrl.hardware import runtime as runtime_lib

DISCRETE = EnvInfo("LunarLander-v3", (8,), 4)
BOX = EnvInfo("LunarLanderContinuous-v3", (8,), 0, action_shape=(2,), action_low=(-1.0, -1.0),
              action_high=(1.0, 1.0))


def normal(rng, *shape):
    return rng.normal(size=shape).astype(np.float32)


def dqn(runtime, rng):
    k, b = 2, 32
    batch = {"obs": normal(rng, k, b, 8), "action": rng.integers(0, 4, (k, b)).astype(np.int32),
             "reward": normal(rng, k, b), "discount": np.full((k, b), 0.99, np.float32),
             "next_obs": normal(rng, k, b, 8)}
    learner = DQNLearner(DQNConfig(hidden_sizes=(64, 64), batch_size=b), DISCRETE, runtime)
    return learner, learner.update(ReplayBatch(batch, False))


def off_policy(cls, config_cls, runtime, rng, noise):
    k, b = 2, 32
    batch = {"obs": normal(rng, k, b, 8), "next_obs": normal(rng, k, b, 8),
             "action": rng.uniform(-1, 1, (k, b, 2)).astype(np.float32), "reward": normal(rng, k, b),
             "discount": np.full((k, b), 0.99, np.float32), "noise_next": normal(rng, k, b, 2)}
    if noise:
        batch["noise"] = normal(rng, k, b, 2)
    config = config_cls(hidden_sizes=(64, 64), batch_size=b, gradient_steps_per_train=k, train_period_env_steps=k)
    learner = cls(config, BOX, runtime)
    return learner, learner.update(batch)


def rollout(rng, b):
    return Rollout(obs=normal(rng, b, 8), actions=rng.integers(0, 4, b).astype(np.int32),
                   advantages=normal(rng, b), returns=normal(rng, b), log_probs=np.full(b, -np.log(4), np.float32),
                   start_env_step=0)


def a2c(runtime, rng):
    learner = A2CLearner(A2CConfig(num_envs=8, rollout_length=5), DISCRETE, runtime)
    return learner, learner.update(rollout(rng, 40))


def ppo(runtime, rng):
    learner = PPOLearner(PPOConfig(num_envs=4, rollout_length=16, batch_size=16, n_epochs=2), DISCRETE, runtime, 0)
    return learner, learner.update(rollout(rng, 64))


def variable_devices(learner):
    # the devices of every variable the learner checkpoints (networks, optimizers, counters)
    found = set()
    for item in learner.checkpoint_items().values():
        variables = [item] if isinstance(item, tf.Variable) else getattr(item, "variables", [])
        for variable in variables() if callable(variables) else variables:
            device = variable.device if isinstance(variable, tf.Variable) else variable.value.device
            found.add(device.rsplit("device:", 1)[-1])
    return found


CASES = {"dqn": dqn, "a2c": a2c, "ppo": ppo,
         "sac": lambda runtime, rng: off_policy(SACLearner, SACConfig, runtime, rng, noise=True),
         "td3": lambda runtime, rng: off_policy(TD3Learner, TD3Config, runtime, rng, noise=False)}
options = runtime_lib.RuntimeOptions(device="cpu:1", logical_cpus=2)
results = {}
for agent, case in CASES.items():
    runs = {}
    for xla in (False, True):
        runtime = runtime_lib.apply(dataclasses.replace(options, xla=xla))
        keras.utils.set_random_seed(0)
        learner, update = case(runtime, np.random.default_rng(0))
        devices = variable_devices(learner)
        runs[xla] = (update, devices)
    (plain, plain_devices), (compiled, compiled_devices) = runs[False], runs[True]
    losses = {name: (plain.metrics[name], compiled.metrics[name]) for name in plain.metrics if "loss" in name}
    results[agent] = {
        "losses": losses,
        "max_weight_difference": max(float(np.abs(a - b).max()) for a, b in zip(plain.weights, compiled.weights)),
        "devices": sorted(set(plain_devices) | set(compiled_devices)),
    }
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def results() -> dict:
    return run_json_script(_SCRIPT)


@pytest.mark.parametrize("agent", ["dqn", "a2c", "ppo", "sac", "td3"])
def test_compiled_step_runs_on_the_variables_device_and_matches_the_uncompiled_one(results, agent):
    result = results[agent]
    assert result["devices"] == ["CPU:1"]  # every optimizer variable (and the step that updates it) on cpu:1
    assert result["losses"], result  # each agent reports at least one loss
    for name, (plain, compiled) in result["losses"].items():
        assert compiled == pytest.approx(plain, rel=LOSS_RTOL, abs=LOSS_ATOL), (agent, name)
    assert result["max_weight_difference"] <= WEIGHTS_ATOL
