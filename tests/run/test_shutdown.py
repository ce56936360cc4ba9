"""SIGTERM and Ctrl-C before training starts stop at once; once the loop polls, they wait for a checkpoint
(tfrl.run.shutdown); and the memory a config needs is checked before anything is allocated (tfrl.memory)."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from tfrl import agents
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.ppo.config import PPOConfig
from tfrl.envs import EnvInfo
from tfrl.errors import UsageError
from tfrl.run import shutdown

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def restore_signal_handlers():
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def test_a_signal_before_the_loop_polls_stops_at_once(restore_signal_handlers):
    stop = shutdown.StopRequest.on_signals()
    with pytest.raises(shutdown.StoppedBeforeTraining) as raised:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)  # the handler runs at the next bytecode boundary
    assert raised.value.exit_code == 128 + signal.SIGTERM
    assert str(raised.value) == "stopped by SIGTERM before training started (nothing was trained or saved)"
    assert not stop.requested()  # then the loop starts polling: the next signal is a request
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.01)
    assert stop.requested() and stop.signal_name == "SIGTERM"


def test_a_launcher_killed_while_it_sets_up_exits_with_one_line(tmp_path):
    script = tmp_path / "setting_up.py"
    script.write_text("import time\nfrom tfrl import cli\nfrom tfrl.run import shutdown\n"
                      "def main(argv):\n"
                      "    shutdown.StopRequest.on_signals()\n"
                      "    print('setting up', flush=True)\n"
                      "    time.sleep(60)  # TF loading, thousands of envs being made...\n"
                      "cli.run(main)\n")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert process.stdout.readline() == "setting up\n"
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM and time.monotonic() - start < 5
    assert stderr == "setting_up.py: error: stopped by SIGTERM before training started (nothing was trained or saved)\n"


@pytest.mark.parametrize("agent, config, expected", [
    # 4-float CartPole observations: 2 * 4 + 3 = 11 floats of 4 bytes per transition.
    ("dqn", DQNConfig(replay_capacity=100_000_000_000, batch_size=32), ("replay", 100_000_000_000 * 11 * 4)),
    ("ppo", PPOConfig(num_envs=100_000_000, rollout_length=1, batch_size=100), ("envs", 100_000_000 << 20)),
])
def test_the_memory_a_config_needs_is_estimated_and_refused_over_what_is_available(agent, config, expected):
    name, size = expected
    cartpole = EnvInfo("CartPole-v1", (4,), 2)
    parts = agents.get(agent).spec.estimate_memory(config, cartpole, "sync")
    assert parts[name] == size
    with pytest.raises(UsageError, match=rf"this run needs about [\d.]+ (TB|PB) of memory \({name} "):
        agents.get(agent).check_memory(config, cartpole)
    agents.get("dqn").check_memory(DQNConfig(), cartpole)  # the defaults fit


def _dqn_memory(config, obs_shape, num_actions, obs_dtype="float32", frame_stack=0):
    info = EnvInfo("test", obs_shape, num_actions, obs_dtype=obs_dtype, frame_stack=frame_stack)
    return agents.get("dqn").spec.estimate_memory(config, info, "sync")


def test_ppo_epochs_are_counted_so_an_absurd_count_is_refused_before_anything_is_written():
    # n_epochs x rollout rows x 16 bytes of minibatch orders: 10^9 epochs of 2048 rows is 32.8 TB.
    config = PPOConfig(n_epochs=1_000_000_000)
    parts = agents.get("ppo").spec.estimate_memory(config, EnvInfo("CartPole-v1", (4,), 2), "sync")
    assert parts["minibatch orders"] == 1_000_000_000 * 2048 * 16
    with pytest.raises(UsageError, match=r"needs about 32.8 TB of memory \(minibatch orders 32.8 TB"):
        agents.get("ppo").check_memory(config, EnvInfo("CartPole-v1", (4,), 2))


def test_network_memory_counts_parameters_and_activations():
    # hidden (10,): 4*10 + 10 + 10*3 + 3 = 83 parameters (a dueling head's value counted: 2 + 1 outputs),
    # 8 copies of 4 bytes; activations: 3 x (batch 2 x K 1 rows) x (10 + 4) x 4 bytes.
    config = DQNConfig(hidden_sizes=(10,), batch_size=2, gradient_steps_per_train=1, replay_capacity=10)
    assert _dqn_memory(config, (4,), 2)["networks"] == 8 * 83 * 4 + 3 * 2 * 14 * 4


def test_image_replay_memory_counts_one_uint8_frame_per_transition():
    # Atari: 84x84 frames, 4 stacked. Per transition: the frame and its predecessor's ref (7056 + 8 bytes, with
    # 2 % to spare: 7205), two int64 refs, action, reward and discount (28): 7233 bytes; 1M of them, 7.2 GB.
    config = DQNConfig(replay_capacity=1_000_000, hidden_sizes=(512,))
    parts = _dqn_memory(config, (84, 84, 4), 6, obs_dtype="uint8", frame_stack=4)
    assert parts["replay"] == 1_000_000 * ((84 * 84 + 8) * 51 // 50 + 16 + 12)
    # Unstacked uint8 images: two whole observations per transition, a quarter of float32's bytes.
    parts = _dqn_memory(DQNConfig(replay_capacity=1000), (10, 5, 1), 3, obs_dtype="uint8")
    assert parts["replay"] == 1000 * (2 * 50 + 12)
    # The Nature CNN's parameters: convolutions (8*8*4*32 + 32) + (4*4*32*64 + 64) + (3*3*64*64 + 64) = 77,984;
    # 7*7*64 = 3136 features into 512 units (1,606,144) and those into 6 + 1 outputs (3,591).
    parts = _dqn_memory(DQNConfig(hidden_sizes=(512,), batch_size=32, gradient_steps_per_train=1),
                        (84, 84, 4), 6, obs_dtype="uint8", frame_stack=4)
    activations = 512 + 20 * 20 * 32 + 9 * 9 * 64 + 7 * 7 * 64 + 84 * 84 * 4
    assert parts["networks"] == 8 * (77_984 + 1_606_144 + 3_591) * 4 + 3 * 32 * activations * 4


@pytest.mark.parametrize("periodic", [True, False])
def test_a_stop_during_an_evaluation_ends_it_at_once_and_saves_the_run(tmp_path, monkeypatch, periodic):
    from tfrl.run import checkpoints, evaluation, training_loop
    from tfrl.hardware.runtime import Runtime, RuntimeOptions

    # An evaluation of 100,000 episodes (the most a config takes) that the stop request must cut short.
    config = DQNConfig(total_env_steps=1000, hidden_sizes=(16,), batch_size=16, replay_capacity=500,
                       learning_starts=300, eval_interval=500 if periodic else 0, eval_episodes=100_000,
                       final_eval_episodes=100_000, log_interval=500, checkpoint_interval=0)
    stop, evaluate_episodes = [], evaluation.evaluate_episodes

    def evaluating(*args, **kwargs):
        stop.append(time.monotonic())  # the signal comes as the evaluation starts
        return evaluate_episodes(*args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate_episodes", evaluating)
    options = training_loop.LoopOptions(progress_bar=False, stop_requested=lambda: bool(stop))
    record = training_loop.train(agents.get("dqn"), config, "CartPole-v1", 0, Runtime(RuntimeOptions(), "/device:CPU:0"),
                                 tmp_path, options)
    assert time.monotonic() - stop[0] < 5  # not the hours of 100,000 episodes
    assert record == {"kind": "stopped", "env_step": 500 if periodic else 1000,
                      "checkpoint": checkpoints.latest_checkpoint_number(tmp_path)}
    assert not (tmp_path / "result.json").exists()
