"""A rollout actor (--actors) never loads TensorFlow: what the driver sends it (its worker's constructor arguments,
the acting mirror, the observation statistics' snapshot, each agent's acting) unpickles and steps a round in a
process where importing TensorFlow or Keras fails. Ray's workers run the same classes; here the driver's payload
is captured where it would go to Ray (ActorPool), without starting Ray."""

import pathlib
import pickle
import subprocess
import sys
import textwrap

import pytest

from tfrl import agents, envs, rollout_actors
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.rollout_actors import pool

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

CASES = {
    "dqn": ("CartPole-v1", {"num_envs": 2, "hidden_sizes": [8], "learning_starts": 10, "train_period_env_steps": 2}),
    "ppo": ("CartPole-v1", {"num_envs": 2, "rollout_length": 4, "batch_size": 8, "hidden_sizes": [8],
                            "normalize_observations": True}),
    "ppo-lstm": ("CartPole-v1", {"num_envs": 2, "rollout_length": 4, "batch_size": 8, "hidden_sizes": [8],
                                 "lstm_units": 4}),
    "sac": ("Pendulum-v1", {"num_envs": 2, "hidden_sizes": [8], "normalize_observations": True,
                            "train_period_env_steps": 2}),
    "td3": ("Pendulum-v1", {"num_envs": 2, "hidden_sizes": [8], "train_period_env_steps": 2}),
}

CHILD = textwrap.dedent("""
    import pickle, sys
    sys.modules["tensorflow"] = None  # `import tensorflow` now raises ImportError, as on a machine without it
    sys.modules["keras"] = None
    payload = pickle.loads(sys.stdin.buffer.read())
    worker = payload["worker"](*payload["args"], 0, payload["size"], payload["seed"])
    result = getattr(worker, payload["method"])(*payload["call_args"])
    print(",".join(sorted(result)))
""")


class _Captured(Exception):
    pass


def _payload(name: str, monkeypatch) -> dict:
    """What the driver of `name`'s agent sends its one rollout actor: the worker and its first call."""
    agent_name = name.split("-")[0]
    env_id, hp = CASES[name]
    captured = {}

    def capture_pool(self, worker_class, args, num_envs, num_actors, seed, on_episode, weight_sync_period=1):
        captured.update(worker=worker_class, args=args, size=num_envs, seed=seed)
        self.shares, self.num_envs, self.env_step = pool.shares(num_envs, num_actors), num_envs, 0

    def capture_call(self, method, *args):
        captured.update(method=method, call_args=args)
        raise _Captured

    monkeypatch.setattr(pool.ActorPool, "__init__", capture_pool)
    monkeypatch.setattr(pool.ActorPool, "call", capture_call)
    monkeypatch.setattr(pool.ActorPool, "weights_ref", lambda self, mirror, clock: (mirror, clock))
    spec = agents.get(agent_name)
    vector_env = envs.make_vector_env(env_id, 1, seed=0)
    info = envs.env_info(vector_env, env_id)
    vector_env.close()
    config = spec.config_cls(**{key: tuple(v) if isinstance(v, list) else v for key, v in hp.items()})
    agent = spec.build(config, info, Runtime(options=RuntimeOptions(), device_name="/device:CPU:0"), 0)
    actors = spec.rollout_actors(agent, envs.as_spec(env_id), rollout_actors.ActorSettings(count=1), 0, "sync",
                                 lambda *episode: None)
    with pytest.raises(_Captured):
        agent.collect(actors)
    return captured


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_actor_steps_a_round_in_a_process_that_cannot_import_tensorflow(name, monkeypatch):
    payload = _payload(name, monkeypatch)
    child = subprocess.run([sys.executable, "-c", CHILD], input=pickle.dumps(payload), capture_output=True,
                           cwd=REPO_ROOT, timeout=120)
    assert child.returncode == 0, child.stderr.decode()[-3000:]
    keys = child.stdout.decode().strip().split(",")
    assert "counted" in keys and "episodes" in keys  # a whole round: statistics counted, episodes reported
    assert ("transitions" if name in ("dqn", "sac", "td3") else "last_value") in keys
