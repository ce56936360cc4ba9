"""Action masks together with memory (lstm_units), for PPO and A2C, end to end on tfrl/RecallPick-v0, whose legal
actions and reward depend on a cue seen earlier in the episode (tfrl.envs.example_envs): training and evaluation
never take an illegal action (the env raises on one), a stopped run resumes, and the stateful export never
answers with an illegal action, whatever the masks and the state it carries."""

import json

import numpy as np
import pytest

import tfrl
from tfrl.models.policy_inputs import MASK_KEY
from tfrl.models.portable import convert
from tfrl.run import launch
from tfrl.run import runs as run_files

ENV = "tfrl/RecallPick-v0"
RAISE = {"illegal": "raise"}  # an illegal action anywhere (training, evaluation) fails the run
COMMON = {"num_envs": 4, "rollout_length": 16, "hidden_sizes": [], "lstm_units": 16, "post_lstm_sizes": [16],
          "eval_interval": 0, "final_eval_episodes": 10, "log_interval": 256}
HP = {"ppo": {**COMMON, "total_env_steps": 2048, "batch_size": 64, "n_epochs": 2, "checkpoint_interval": 512},
      "a2c": {**COMMON, "total_env_steps": 1024, "checkpoint_interval": 0}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("masks_with_memory")
    # PPO is stopped after 8 passes (rollouts of 4 x 16 = 64 env steps: 512) and resumed by the same call.
    polls = []
    prepared = launch.prepare(launch.TrainRequest(agent="ppo", env=ENV, env_kwargs=RAISE, preset="none",
                                                  hp=HP["ppo"], run_dir=base / "ppo"))
    stopped = launch.execute(prepared, stop_requested=lambda: polls.append(1) or len(polls) > 8)
    assert stopped.record["kind"] == "stopped", stopped.record
    runs = {agent: tfrl.train(agent, ENV, env_kwargs=RAISE, preset="none", hp=HP[agent], run_dir=base / agent,
                              verbose=0) for agent in ("ppo", "a2c")}
    return {**runs, "ppo_stopped_at": stopped.record["env_step"]}


@pytest.mark.parametrize("agent", ["ppo", "a2c"])
def test_a_masked_run_with_memory_trains_and_evaluates_without_an_illegal_action(runs, agent):
    run = runs[agent]
    assert run.complete and run.result["env_step"] == HP[agent]["total_env_steps"]
    assert np.isfinite(run.result["return_mean"]) and run.result["return_mean"] >= 0  # -1 only on an illegal one
    records = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    if agent == "ppo":
        assert 0 < runs["ppo_stopped_at"] < 2048 and {"kind": "resume", "env_step": runs["ppo_stopped_at"]} in records


@pytest.mark.parametrize("agent, file", [("ppo", None), ("a2c", None), ("ppo", "policy.tflite"),
                                         ("ppo", "policy.onnx")])
def test_the_stateful_export_never_answers_with_an_illegal_action(runs, agent, file, tmp_path_factory):
    # 50 episodes side by side, 20 steps each: random cues on each first step, then random masks (at least one
    # legal action, often one alone); the policy carries each row's state from call to call.
    rng = np.random.default_rng(7)
    policy = tfrl.load_policy(runs[agent].saved_model if file is None else _portable(runs, tmp_path_factory) / file)
    assert policy.state_size == 2 * 2 * 16  # h and c of the policy's and the value's LSTM
    rows, checked = 50, 0
    for step in range(20):
        cue = np.zeros((rows, 4), np.float32)
        if step == 0:
            cue[np.arange(rows), rng.integers(0, 4, rows)] = 1.0
        mask = (rng.random((rows, 4)) < 0.3).astype(np.int8)
        mask[np.arange(rows), rng.integers(0, 4, rows)] = 1
        actions = policy({"cue": cue, MASK_KEY: mask})
        assert mask[np.arange(rows), actions].all(), step
        checked += rows
    assert checked == 1000
    # A mask that allows nothing gets no action, state or not.
    with pytest.raises(ValueError, match="no legal action|allows no"):
        policy({"cue": np.zeros((1, 4), np.float32), MASK_KEY: np.zeros((1, 4), np.int8)})


def _portable(runs, tmp_path_factory):
    """The PPO run's LiteRT and ONNX files (exported once), their parity checked along episodes of the env."""
    if "portable" not in runs:
        def finisher(env):
            return convert.finisher(("litert", "onnx"), "none", env, num_observations=200)

        runs["portable"] = run_files.export_run(runs["ppo"].run_dir, tmp_path_factory.mktemp("portable"), "recall",
                                                finisher=finisher)
    return runs["portable"]


@pytest.mark.slow
def test_the_recallpick_preset_remembers_the_cue(tmp_path):
    # Optimal 3.5 on average; without memory 1.75 at best (tfrl.envs.example_envs). ppo-lstm-recallpick's
    # 100k env steps end near the optimum (docs/benchmarks.md).
    run = tfrl.train("ppo", ENV, env_kwargs=RAISE, run_dir=tmp_path / "run", verbose=0)
    assert run.result["return_mean"] > 3.0, run.result
