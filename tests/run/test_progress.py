"""The progress bar of a run on a terminal (tfrl.run.progress, through tfrl.run.metrics.MetricsLogger)."""

import io
import logging as std_logging
import re

from absl import logging

from tfrl.hardware import quiet_logs
from tfrl.run import progress
from tfrl.run.metrics import MetricsLogger


def _terminal(monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr(quiet_logs, "terminal", lambda: screen)
    return screen


def _frames(screen):
    """What the bar showed, frame by frame, and the whole lines written above it."""
    return [frame for frame in re.split(r"[\r\n]", screen.getvalue()) if frame.strip()]


def test_the_bar_shows_current_values_and_the_recent_episode_return(tmp_path, monkeypatch):
    screen = _terminal(monkeypatch)
    logger = MetricsLogger(tmp_path, 10_000, progress_bar=True)
    for step, episode_return in ((1000, 10.0), (1500, 30.0)):
        logger.episode(step, episode_return, 20)
    logger.log("train", 2000, {"loss": 0.5, "epsilon": 0.9})
    logger.episode(3000, 100.0, 50)
    logger.log("train", 4000, {"loss": 0.25, "epsilon": 0.04})
    logger.close()
    frames = _frames(screen)
    # The values of the last record (not averages since the start): epsilon 0.04, loss 0.25, and the mean
    # return of the episodes since the record before (100), not of all of them.
    assert "4.00k/10.0k" in frames[-1] and "return=100, loss=0.25, eps=0.04" in frames[-1], frames


def test_log_lines_get_lines_of_their_own_above_the_bar(tmp_path, monkeypatch):
    screen = _terminal(monkeypatch)
    absl_handler = logging.get_absl_handler()
    std_logging.getLogger().addHandler(absl_handler)  # what absl's app.run does in a launcher
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.INFO)
    try:
        logger = MetricsLogger(tmp_path, 10_000, progress_bar=True)
        logger.log("train", 2000, {"loss": 0.5})
        logger.log("eval", 2000, {"return_mean": 42.0, "return_std": 1.0})
        logger.close()
    finally:
        logging.set_verbosity(verbosity)
        std_logging.getLogger().removeHandler(absl_handler)
    assert not absl_handler.filters  # taken off again
    lines = [line.split("\r")[-1] for line in screen.getvalue().split("\n")]  # what a terminal shows
    eval_lines = [line for line in lines if "[eval] env_step=2000" in line]
    assert len(eval_lines) == 1 and "env steps" not in eval_lines[0], lines  # not glued to a bar frame


def test_after_a_resume_the_bar_counts_from_the_resume_point(tmp_path, monkeypatch):
    screen = _terminal(monkeypatch)
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train", "env_step": 6000}\n')
    logger = MetricsLogger(tmp_path, 10_000, progress_bar=True, start_env_step=6000)
    bar = logger._progress._bar
    assert (bar.n, bar.initial) == (6000, 6000)  # tqdm's rate and ETA count the steps since `initial`
    logger.log("train", 8000, {"loss": 0.5})
    assert bar.n == 8000
    logger.close()
    assert any("6.00k/10.0k" in f for f in _frames(screen))


def test_no_bar_unless_asked_or_on_a_terminal(tmp_path, monkeypatch):
    _terminal(monkeypatch)  # a StringIO: not a terminal
    assert not progress.wanted()
    logger = MetricsLogger(tmp_path, 100)
    assert logger._progress is None
    logger.close()


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_bar_ticks_between_records_says_when_it_evaluates_and_counts_evaluations_in_the_time_left(
        tmp_path, monkeypatch):
    screen = _terminal(monkeypatch)
    clock = _Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    logger = MetricsLogger(tmp_path, 10_000, progress_bar=True, final_eval_episodes=100)
    clock.now += 0.1
    logger.tick(500)  # within TICK_SECONDS of the start: not drawn yet
    assert not any("500/10.0k" in f for f in _frames(screen))
    clock.now += 0.5
    logger.tick(1000)  # no log record since the start, yet the bar moves
    assert "1.00k/10.0k" in _frames(screen)[-1]
    # 1000 env steps in 0.6 s: 9000 more take 5.4 s ("00:05"), before any evaluation.
    assert "left=00:05" in _frames(screen)[-1], _frames(screen)[-1]
    with logger.evaluating(episodes=10):
        assert _frames(screen)[-1].startswith("evaluating ")
        clock.now += 2.0  # a periodic evaluation: 10 episodes in 2 s
    clock.now += 0.4
    logger.tick(2000)
    # 2000 env steps in 3.0 s (the evaluation included): 8000 more take 12 s; the final evaluation's 100 episodes
    # at 0.2 s each add 20 s: 32 s.
    assert "left=00:32" in _frames(screen)[-1], _frames(screen)[-1]
    with logger.evaluating("final evaluation (100 episodes)"):
        assert _frames(screen)[-1].startswith("final evaluation (100 episodes) ")
    logger.close()


def test_the_native_noise_pattern_drops_start_up_lines_and_keeps_real_errors():
    # Lines as TF 2.21 prints them (the cuInit one from a CUDA build with CUDA_VISIBLE_DEVICES= on an H100 host).
    noise = [b"I0000 00:00:1796665405.975756   13204 port.cc:153] oneDNN custom operations are on.",
             b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
             b"E0000 00:00:1796670088.209701    1807 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
             b"error: Failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"]
    kept = [b"E0000 00:00:1796670088.209701    1807 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
            b"error: Failed call to cuInit: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: system has unsupported display driver",
            b"E0000 00:00:1796670088.209701    1807 some_kernel.cc:12] an op failed",
            b"train.py: error: --device=gpu:7 but this machine has no GPU"]
    assert all(quiet_logs.NATIVE_NOISE.match(line) for line in noise)
    assert not any(quiet_logs.NATIVE_NOISE.match(line) for line in kept)
