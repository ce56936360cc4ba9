"""Atari through ale-py (the atari extra, which the test extra installs): the preprocessing, and a short Pong run
through train, a kill and resume, export, evaluation with a video, and serving uint8 frames over REST."""

import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np

import tfrl
from serving_helpers import Client, running_server
from tfrl import envs
from tfrl.model_server.options import ServerOptions
from tfrl.run import checkpoints

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")


def test_training_envs_clip_rewards_and_end_at_a_lost_life_and_evaluation_envs_do_not():
    train = envs.make_vector_env("ALE/Breakout-v5", 1, seed=0, training=True)
    evaluate = envs.make_vector_env("ALE/Breakout-v5", 1, seed=0)
    try:
        assert train.first_obs.shape == (1, 84, 84, 4) and train.first_obs.dtype == np.uint8
        info = envs.env_info(train, "ALE/Breakout-v5")
        assert info.frame_stack == 4 and info.obs_dtype == "uint8" and info.num_actions == 4
        # A reset stack repeats its first frame (FrameStackObservation's padding).
        assert all(np.array_equal(train.first_obs[0, ..., 0], train.first_obs[0, ..., i]) for i in range(4))
        rng = np.random.default_rng(0)
        dones, games, rewards = 0, [], []
        while not games:
            _, reward, terminated, truncated, infos = train.step(rng.integers(0, 4, 1))
            rewards.append(float(reward[0]))
            dones += int(terminated[0] or truncated[0])
            games += envs.finished_episodes(terminated | truncated, infos)
        assert dones == 5 and len(games) == 1  # five lives: five learner episodes, one game with its score
        assert set(rewards) <= {0.0, 1.0} and games[0][0] >= sum(rewards)  # bricks score up to 7 points, clipped to 1
        evaluation_dones = 0
        while evaluation_dones == 0:
            _, _, terminated, truncated, infos = evaluate.step(rng.integers(0, 4, 1))
            evaluation_dones += int(terminated[0] or truncated[0])
        assert envs.finished_episodes(terminated | truncated, infos)  # the first done is the whole game's end
    finally:
        train.close()
        evaluate.close()


def test_preprocessing_switches_through_the_env_kwargs_and_v4_ids_get_it_too():
    spec = envs.as_spec("ALE/Pong-v5", {"frame_stack": 2, "screen_size": 64, "clip_rewards": False})
    env = envs.make_vector_env(spec, 1, seed=0, training=True)
    v4 = envs.make_vector_env("PongNoFrameskip-v4", 1, seed=0, training=True)
    try:
        assert env.first_obs.shape == (1, 64, 64, 2) and envs.env_info(env, spec.name).frame_stack == 2
        assert v4.first_obs.shape == (1, 84, 84, 4) and envs.env_info(v4, "PongNoFrameskip-v4").frame_stack == 4
        assert v4.envs[0].unwrapped.ale.getFloat("repeat_action_probability") == 0.0  # v4: no sticky actions
    finally:
        env.close()
        v4.close()


def test_a_short_pong_run_trains_resumes_exports_evaluates_with_video_and_serves_uint8_frames(tmp_path):
    run_dir = tmp_path / "run"
    hp = ["total_env_steps=1600", "num_envs=2", "learning_starts=200", "replay_capacity=2000", "batch_size=8",
          "hidden_sizes=32", "checkpoint_interval=400", "eval_interval=0", "final_eval_episodes=1",
          "log_interval=400"]
    args = [sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--agent=dqn", "--env=ALE/Pong-v5",
            "--preset=none", f"--run_dir={run_dir}", *[f"--hp={h}" for h in hp]]
    with open(tmp_path / "1.err", "w") as err:
        first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=ENV, cwd=tmp_path)
        deadline = time.monotonic() + 180
        while not checkpoints.latest_checkpoint_number(run_dir):
            assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "1.err").read_text()[-3000:]
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait()
    resumed = subprocess.run([*args[:2], "--resume", f"--run_dir={run_dir}"], capture_output=True, text=True,
                             env=ENV, cwd=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert re.search(r"restored checkpoint \d+ \(env step \d+\)", resumed.stderr)
    assert "final evaluation: env=ALE/Pong-v5 episodes=1 return=" in resumed.stdout
    saved_model = run_dir / "saved_models" / "dqn-ALE-Pong-v5" / "1"
    assert saved_model.is_dir()

    gif = tmp_path / "pong.gif"
    evaluated = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "evaluate.py"),
                                f"--saved_model={saved_model}", "--episodes=1", f"--video={gif}"],
                               capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    game_score = re.search(r"video: .*pong\.gif \(one episode, seed \d+: return (-?[\d.]+)", evaluated.stdout)
    assert game_score and -21 <= float(game_score[1]) <= 21 and gif.stat().st_size > 0  # the unclipped score

    frames = envs.make_vector_env("ALE/Pong-v5", 3, seed=5).first_obs  # [3, 84, 84, 4] uint8
    policy = tfrl.load_policy(saved_model)
    assert policy.obs_dtype == np.uint8 and policy.metadata["observation"] == {"shape": [84, 84, 4], "dtype": "uint8"}
    options = ServerOptions(model_name="pong", model_base_path=saved_model.parent, file_system_poll_wait_seconds=0)
    with running_server(options) as (port, _):
        client = Client(port)
        status, body = client.request("POST", "/v1/models/pong:predict", {"instances": frames.tolist()})
        assert status == 200, body
        assert [row["action"] for row in body["predictions"]] == policy(frames).tolist()
        status, body = client.request("POST", "/v1/models/pong:predict",
                                      {"instances": (frames.astype(np.int64) + 200).tolist()})
        assert status == 400 and "outside uint8's range [0, 255]" in body["error"], body
        client.close()
