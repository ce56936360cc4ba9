"""CrossQ's train step with and without XLA on this machine's CPU, one thread: ms per gradient step, K=64 per call.

    python benchmarks/crossq_xla.py off 256,256      # XLA off, critics of [256, 256] (crossq-pendulum's)
    python benchmarks/crossq_xla.py on 256,256       # XLA on; alternate the two, one at a time
"""

import sys

import numpy as np

import dqn_train_step  # noqa: E402  (benchmarks/ is on the path when run from it or as a script)
from tfrl.agents.crossq.config import CrossQConfig
from tfrl.envs import EnvInfo
from tfrl.hardware import runtime as runtime_lib

PENDULUM = EnvInfo(env_id="Pendulum-v1", obs_shape=(3,), num_actions=0, action_shape=(1,), action_low=(-2.0,),
                   action_high=(2.0,))


def main(xla: str, critic_sizes: str) -> None:
    runtime = runtime_lib.apply(runtime_lib.RuntimeOptions(xla=xla == "on", intra_op_threads=1, inter_op_threads=1))
    config = CrossQConfig(critic_hidden_sizes=tuple(int(x) for x in critic_sizes.split(",")),
                          gradient_steps_per_train=64)
    call = dqn_train_step.off_policy_train_call("crossq", config, PENDULUM, runtime, np.random.default_rng(0))
    wall, _ = dqn_train_step.time_calls(call, 5, 3, warmup=3)
    print(f"xla={xla} critics={config.critic_hidden_sizes}: {wall / 64 * 1e3:.2f} ms per gradient step")


if __name__ == "__main__":
    main(*sys.argv[1:3])
