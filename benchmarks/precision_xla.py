"""Benchmark: DQN, A2C and SAC train-step time for each precision policy x XLA on/off, in one process.

    python benchmarks/precision_xla.py                                  # all 6 combinations, both agents
    python benchmarks/precision_xla.py --combos=float32:off,mixed_bfloat16:off --agents=dqn
    python benchmarks/precision_xla.py --agents=dqn_cnn --calls=20 --repeats=3 --warmup_calls=5
    python benchmarks/precision_xla.py --agents=sac --calls=10 --repeats=3 --warmup_calls=3
    python benchmarks/precision_xla.py --agents=sac_halfcheetah,td3_halfcheetah --threads=1 --calls=5 --repeats=5 \
        --warmup_calls=3 --combos=float32:off,float32:on,mixed_bfloat16:off

Shapes are LunarLander's (obs 8, 4 actions). DQN: one train call = K=4 gradient steps on batches of 128,
Q-network [256, 256] (as benchmarks/dqn_train_step.py). A2C: one train call = one update on a rollout of
8 envs x 5 steps = 40 transitions, separate [64, 64] tanh torsos (the SB3 zoo settings). dqn_cnn: Atari's
shapes (84x84x4 uint8 frames, 4 actions), the Nature CNN and a [512] layer, one train call = one gradient step
on a batch of 32 (Mnih et al. 2015). ppo_lunarlander: one update of the ppo-lunarlander preset (16 x 1024
transitions, 4 epochs of minibatches of 64: 1024 Adam steps in one call, [64, 64] tanh torsos). sac: LunarLanderContinuous' shapes (obs 8, 2 actions), twin Q-networks
and an actor of [256, 256], one train call = K=64 gradient steps on batches of 256 (SAC's presets); its "first
loss" is the critic loss. sac_halfcheetah, td3_halfcheetah: HalfCheetah-v5's shapes (obs 17, 6 actions) and the
settings of the presets sac-halfcheetah-sb3zoo ([256, 256], batch 256) and td3-halfcheetah-sb3zoo ([400, 300],
batch 256), K=64 gradient steps per call.

Every learner starts from the same weights (Keras' seed is reset before each is built) and trains first on the
same batch (each agent's batch is drawn from a generator seeded anew for every learner); the "first loss" column
shows what each precision and XLA compute from them, against float32's without XLA.

All learners are built first (each under its own Keras precision policy; a layer keeps the policy it was
built with), then timed in interleaved blocks (A B C ... A B C ...), so that a burst of load from other
processes on a shared machine hits every combination alike. Reported: median over --repeats blocks of the
wall ms per train call, and process CPU ms per call. Timings are noisy on a shared VM: run it alone.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import keras
import numpy as np
from absl import app, flags

import dqn_train_step  # benchmarks/, the script's directory
from tfrl import agents, config as config_lib, presets
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
from tfrl.envs import EnvInfo
from tfrl.hardware import runtime as runtime_lib

ALL_COMBOS = [f"{policy}:{xla}" for policy in runtime_lib.PRECISION_POLICIES for xla in ("off", "on")]
flags.DEFINE_list("combos", ALL_COMBOS, "precision:xla pairs, xla one of on/off.")
flags.DEFINE_list("agents", ["dqn", "a2c"], "Agents whose train step is timed: dqn, a2c, ppo_lunarlander, dqn_cnn, "
                  "sac, sac_halfcheetah, td3_halfcheetah.")
flags.DEFINE_integer("calls", 100, "Train calls per timed block.")
flags.DEFINE_integer("repeats", 5, "Timed blocks per combination; the median is reported.")
flags.DEFINE_integer("warmup_calls", 20, "Untimed calls per learner first (tracing, XLA compilation).")
flags.DEFINE_integer("cartpole_seed", None, "Instead of timing: train A2C on CartPole-v1 under each combination "
                     "with tests/hardware/test_precision_xla.py's config (30k env steps) and this seed; print the greedy "
                     "return over 20 episodes and the wall time.")
flags.DEFINE_integer("threads", 0, "TensorFlow's intra-op and inter-op threads (0: TF's default).")
FLAGS = flags.FLAGS

LUNAR = EnvInfo("LunarLander-v3", (8,), 4)
ATARI = EnvInfo("ALE/Breakout-v5", (84, 84, 4), 4, obs_dtype="uint8")
LUNAR_CONTINUOUS = EnvInfo("LunarLanderContinuous-v3", (8,), 0, action_shape=(2,), action_low=(-1.0, -1.0),
                           action_high=(1.0, 1.0))
HALF_CHEETAH = EnvInfo("HalfCheetah-v5", (17,), 0, action_shape=(6,), action_low=(-1.0,) * 6, action_high=(1.0,) * 6)


@dataclasses.dataclass
class Case:
    """One (agent, precision, XLA) learner and the train call that is timed."""

    agent: str
    precision: str
    xla: bool
    train: callable
    walls: list[float] = dataclasses.field(default_factory=list)  # s per call, one entry per block
    cpus: list[float] = dataclasses.field(default_factory=list)
    first_loss: float = float("nan")  # of the first train call, from the shared initial weights


def _dqn_case(runtime: runtime_lib.Runtime, rng: np.random.Generator) -> callable:
    learner = DQNLearner(DQNConfig(hidden_sizes=(256, 256), batch_size=128), LUNAR, runtime)
    k, b = 4, 128
    batch = {"obs": rng.normal(size=(k, b, 8)).astype(np.float32),
             "action": rng.integers(0, 4, size=(k, b)).astype(np.int32),
             "reward": rng.normal(size=(k, b)).astype(np.float32),
             "discount": np.full((k, b), 0.99, np.float32),
             "next_obs": rng.normal(size=(k, b, 8)).astype(np.float32)}
    return lambda: learner.update(ReplayBatch(batch, False))


def _dqn_cnn_case(runtime: runtime_lib.Runtime, rng: np.random.Generator) -> callable:
    learner = DQNLearner(DQNConfig(hidden_sizes=(512,), batch_size=32), ATARI, runtime)
    k, b = 1, 32
    frames = np.random.default_rng(1)  # the same batch for every case
    batch = {"obs": frames.integers(0, 256, size=(k, b, 84, 84, 4), dtype=np.uint8),
             "action": frames.integers(0, 4, size=(k, b)).astype(np.int32),
             "reward": frames.choice([-1.0, 0.0, 1.0], size=(k, b)).astype(np.float32),
             "discount": np.full((k, b), 0.99, np.float32),
             "next_obs": frames.integers(0, 256, size=(k, b, 84, 84, 4), dtype=np.uint8)}
    return lambda: learner.update(ReplayBatch(batch, False))


def _a2c_case(runtime: runtime_lib.Runtime, rng: np.random.Generator) -> callable:
    learner = A2CLearner(A2CConfig(learning_rate=8.3e-4), LUNAR, runtime)
    b = 8 * 5
    rollout = Rollout(obs=rng.normal(size=(b, 8)).astype(np.float32),
                      actions=rng.integers(0, 4, size=b).astype(np.int32),
                      advantages=rng.normal(size=b).astype(np.float32),
                      returns=rng.normal(size=b).astype(np.float32),
                      log_probs=np.zeros(b, np.float32), start_env_step=0)
    return lambda: learner.update(rollout)


def _ppo_lunarlander_case(runtime: runtime_lib.Runtime, rng: np.random.Generator) -> callable:
    """One update of the ppo-lunarlander preset: a rollout of 16 envs x 1024 steps, 4 epochs of minibatches of 64
    (1024 Adam steps in one call)."""
    preset = presets.find("ppo", LUNAR.env_id, "ppo-lunarlander")
    config = config_lib.apply_overrides(PPOConfig(), preset.hparams, preset.name)
    learner = PPOLearner(config, LUNAR, runtime, seed=0)
    b = config.num_envs * config.rollout_length
    rollout = Rollout(obs=rng.normal(size=(b, 8)).astype(np.float32),
                      actions=rng.integers(0, 4, size=b).astype(np.int32),
                      advantages=rng.normal(size=b).astype(np.float32),
                      returns=rng.normal(size=b).astype(np.float32),
                      log_probs=np.full(b, -np.log(4), np.float32), start_env_step=0)
    return lambda: learner.update(rollout)


def _sac_case(runtime: runtime_lib.Runtime, rng: np.random.Generator) -> callable:
    learner = SACLearner(SACConfig(gradient_steps_per_train=64, train_period_env_steps=64), LUNAR_CONTINUOUS,
                         runtime)
    batch = dqn_train_step.random_sac_batch(64, 256, (8,), 2, 0.99, rng)
    return lambda: learner.update(batch)


def _mujoco_case(agent: str, runtime: runtime_lib.Runtime, rng: np.random.Generator) -> callable:
    """SAC's or TD3's step with its HalfCheetah -sb3zoo preset's settings on random transitions."""
    preset = presets.find(agent, HALF_CHEETAH.env_id, f"{agent}-halfcheetah-sb3zoo")
    config = config_lib.apply_overrides(SACConfig() if agent == "sac" else TD3Config(), preset.hparams, preset.name)
    return dqn_train_step.off_policy_train_call(agent, config, HALF_CHEETAH, runtime, rng)


def _parse_combo(combo: str) -> tuple[str, bool]:
    precision, _, xla = combo.partition(":")
    if precision not in runtime_lib.PRECISION_POLICIES or xla not in ("on", "off"):
        raise app.UsageError(f"--combos: {combo!r} is not precision:on|off with precision one of "
                             f"{', '.join(runtime_lib.PRECISION_POLICIES)}")
    return precision, xla == "on"


def cartpole_outcomes(combos: list[tuple[str, bool]], seed: int) -> None:
    import pathlib
    import tempfile

    from tfrl.run import training_loop

    # The same config as tests/hardware/test_precision_xla.py.
    config = A2CConfig(total_env_steps=30_000, num_envs=8, rollout_length=8, gamma=0.98, gae_lambda=0.8,
                       learning_rate=1e-3, lr_schedule="linear", eval_interval=0, final_eval_episodes=20,
                       log_interval=10**9, checkpoint_interval=0)
    print("| precision | XLA | seed | greedy return, 20 episodes | wall time (s), incl. evaluation |")
    print("|---|---|---|---|---|")
    for precision, xla in combos:
        runtime = runtime_lib.apply(runtime_lib.RuntimeOptions(mixed_precision=precision, xla=xla))
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as run_dir:
            final = training_loop.train(agents.get("a2c"), config, "CartPole-v1", seed, runtime, pathlib.Path(run_dir),
                                        training_loop.LoopOptions(progress_bar=False))
        print(f"| {precision} | {'on' if xla else 'off'} | {seed} | {final['return_mean']:.1f} ± "
              f"{final['return_std']:.1f} | {time.perf_counter() - start:.1f} |", flush=True)


def main(argv):
    del argv
    if FLAGS.cartpole_seed is not None:
        cartpole_outcomes([_parse_combo(combo) for combo in FLAGS.combos], FLAGS.cartpole_seed)
        return
    builders = {"dqn": _dqn_case, "a2c": _a2c_case, "ppo_lunarlander": _ppo_lunarlander_case, "dqn_cnn": _dqn_cnn_case,
                "sac": _sac_case,
                "sac_halfcheetah": lambda runtime, rng: _mujoco_case("sac", runtime, rng),
                "td3_halfcheetah": lambda runtime, rng: _mujoco_case("td3", runtime, rng)}
    for agent in FLAGS.agents:
        if agent not in builders:
            raise app.UsageError(f"--agents: unknown agent {agent!r}; choose from {', '.join(builders)}")
    runtime = None
    cases = []
    for precision, xla in map(_parse_combo, FLAGS.combos):
        # Only the precision policy and the XLA option change between apply() calls; devices stay as they are.
        runtime = runtime_lib.apply(runtime_lib.RuntimeOptions(mixed_precision=precision, xla=xla,
                                                               intra_op_threads=FLAGS.threads,
                                                               inter_op_threads=FLAGS.threads))
        for agent in FLAGS.agents:
            keras.utils.set_random_seed(0)
            # A fresh generator per learner: one shared by all would give each combination other batches.
            cases.append(Case(agent, precision, xla, builders[agent](runtime, np.random.default_rng(0))))
    # The banner of the last combination, minus its precision and XLA lines (they differ per row below).
    print("\n".join(line for line in runtime.banner().splitlines()
                    if not line.lstrip().startswith(("precision:", "XLA:"))), flush=True)
    for case in cases:
        metrics = case.train().metrics
        case.first_loss = metrics["loss"] if "loss" in metrics else metrics["critic_loss"]
        for _ in range(FLAGS.warmup_calls):  # trace, compile, warm up
            case.train()
    for _ in range(FLAGS.repeats):
        for case in cases:
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(FLAGS.calls):
                case.train()
            case.walls.append((time.perf_counter() - wall) / FLAGS.calls)
            case.cpus.append((time.process_time() - cpu) / FLAGS.calls)
    print("| agent | precision | XLA | ms per train call (wall, median) | min..max over blocks | CPU ms per call "
          "| first loss (float32's, off) |")
    print("|---|---|---|---|---|---|---|")
    reference = {case.agent: case.first_loss for case in cases if case.precision == "float32" and not case.xla}
    for case in cases:
        print(f"| {case.agent} | {case.precision} | {'on' if case.xla else 'off'} | "
              f"{statistics.median(case.walls) * 1e3:.2f} | {min(case.walls) * 1e3:.2f}..{max(case.walls) * 1e3:.2f} | "
              f"{statistics.median(case.cpus) * 1e3:.2f} | {case.first_loss:.5f} "
              f"({reference.get(case.agent, float('nan')):.5f}) |", flush=True)


if __name__ == "__main__":
    app.run(main)
