"""tfrl.run.best_policy: which evaluations save the policy, what a resumed run keeps, and the A2C loop with it on.

The DQN side runs end to end through scripts/train.py (test_train_script.py), with the export checked there.
"""

import json
import math
import types

import numpy as np
import pytest
import tensorflow as tf

from tfrl.hardware import distribute, runtime as runtime_lib
from tfrl.models import serving
from tfrl.run import CONFIG_FILE, best_policy, checkpoints, evaluation, runs


def _weights(value):
    return {"network": tf.Variable([value, value], dtype=tf.float32)}


def test_only_an_evaluation_above_every_earlier_one_saves_the_policy(tmp_path):
    items = _weights(0.0)
    best = best_policy.BestPolicy(tmp_path, items, start_over=True)
    assert (best.env_step, best.return_mean) == (None, -math.inf)
    saved = []
    for env_step, return_mean, weight in [(100, 5.0, 1.0), (200, 3.0, 2.0), (300, 5.0, 3.0), (400, math.nan, 4.0),
                                          (500, 7.5, 5.0), (600, -1.0, 6.0)]:
        items["network"].assign([weight, weight])
        saved.append(best.offer(env_step, return_mean))
    # 5.0 is the first best; 3.0 is lower, an equal 5.0 keeps the earlier policy, NaN never wins, 7.5 beats 5.0.
    assert saved == [True, False, False, False, True, False]
    assert (best.env_step, best.return_mean) == (500, 7.5)
    assert len(list((tmp_path / best_policy.BEST_POLICY_DIR).glob("ckpt-*.index"))) == 1  # one kept

    # A resumed run reads the best back from disk, and restoring it gives the weights saved at env step 500.
    fresh = _weights(-1.0)
    resumed = best_policy.BestPolicy(tmp_path, fresh, start_over=False)
    assert (resumed.env_step, resumed.return_mean) == (500, 7.5)
    assert not resumed.offer(700, 7.0)
    restored = best_policy.restore(tmp_path, fresh)
    assert (restored.env_step, restored.loop_state) == (500, {"eval_return_mean": 7.5})
    assert fresh["network"].numpy().tolist() == [5.0, 5.0]


def test_a_run_without_a_best_policy_restores_none(tmp_path):
    assert best_policy.restore(tmp_path, _weights(0.0)) is None


def test_a_run_that_starts_over_deletes_the_earlier_attempts_best_policy(tmp_path):
    best_policy.BestPolicy(tmp_path, _weights(1.0), start_over=True).offer(100, 50.0)
    assert best_policy.restore(tmp_path, _weights(0.0)) is not None
    again = best_policy.BestPolicy(tmp_path, _weights(2.0), start_over=True)
    assert (again.env_step, again.return_mean) == (None, -math.inf)
    assert not (tmp_path / best_policy.BEST_POLICY_DIR).exists()
    assert again.offer(100, 10.0)  # 10 < the deleted 50, and still the best of this attempt


@pytest.mark.parametrize("saved_return", [None, "high", math.inf])
def test_a_best_policy_without_a_valid_evaluation_return_is_replaced_by_the_next_evaluation(tmp_path, saved_return):
    # Only a hand-edited file has one; it must not crash the run (float(None)) or win forever (inf).
    checkpoints.Checkpointer(tmp_path, _weights(1.0), keep=1, subdir=best_policy.BEST_POLICY_DIR).save(
        100, {"eval_return_mean": saved_return})
    best = best_policy.BestPolicy(tmp_path, _weights(2.0), start_over=False)
    assert (best.env_step, best.return_mean) == (100, -math.inf)
    assert best.offer(200, -500.0)


def test_keep_best_policy_is_refused_with_several_workers():
    one, two = (types.SimpleNamespace(cluster=types.SimpleNamespace(num_workers=n)) for n in (1, 2))
    best_policy.check_runtime(True, one)
    best_policy.check_runtime(False, two)
    with pytest.raises(distribute.DistributeConfigError, match="keep_best_policy is not supported with several"):
        best_policy.check_runtime(True, two)


SEED = 2
# The periodic evaluations' return means, scripted: which policy is saved must not hang on how training went on a
# given CPU (CI's float rounding once made the last policy the best). The best is the second; the fourth ties it.
SCRIPTED_RETURNS = [10.0, 40.0, 20.0, 40.0, 30.0, 35.0]


def test_a2c_loop_keeps_evaluates_and_loads_the_best_policy(tmp_path, monkeypatch):
    from tfrl import agents
    from tfrl.run import training_loop
    from tfrl.agents.a2c.config import A2CConfig

    real_evaluate = evaluation.evaluate
    probe_obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    seen = []  # per periodic evaluation: (the real greedy returns, V(probe_obs) of the policy evaluated)

    def scripted_evaluate(policy, env_id, num_episodes, seed, **kwargs):
        real = real_evaluate(policy, env_id, num_episodes, seed, **kwargs)
        if seed != SEED + evaluation.PERIODIC_SEED_OFFSET:
            return real  # the final evaluations run as they are
        seen.append((real, policy.__self__.actor.value(probe_obs)))  # policy is the agent's greedy method
        return np.full(num_episodes, SCRIPTED_RETURNS[len(seen) - 1])

    monkeypatch.setattr(evaluation, "evaluate", scripted_evaluate)
    config = A2CConfig(total_env_steps=6000, num_envs=4, rollout_length=5, hidden_sizes=(16,), learning_rate=3e-3,
                       eval_interval=1000, eval_episodes=4, final_eval_episodes=6, log_interval=10**9,
                       checkpoint_interval=0, keep_best_policy=True)
    runtime = runtime_lib.apply(runtime_lib.RuntimeOptions())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / CONFIG_FILE).write_text(json.dumps({"agent": "a2c", "env_id": "CartPole-v1", "seed": SEED,
                                                         "hparams": {"hidden_sizes": [16]}}))
    final = training_loop.train(agents.get("a2c"), config, "CartPole-v1", SEED, runtime, run_dir,
                                training_loop.LoopOptions(progress_bar=False))
    monkeypatch.undo()

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["env_step"] for r in evals] == [1000, 2000, 3000, 4000, 5000, 6000]
    assert [r["return_mean"] for r in evals] == SCRIPTED_RETURNS
    assert (final["best"]["best_env_step"], final["best"]["best_eval_return_mean"]) == (2000, 40.0)
    assert [r["kind"] for r in records[-2:]] == ["final_eval", "best_eval"]

    # What the run saved is the policy evaluated at env step 2000: its value head gives that policy's V on the
    # probe observations, not the last one's, and it replays that policy's real greedy returns on the periodic
    # evaluation's episodes (seed + 10000). runs.load_policy (export, evaluate.py --best) loads it, and it
    # replays the best_eval record's episodes (seed + 20000).
    loaded = runs.load_policy(run_dir, best=True)
    assert (loaded.env_step, loaded.best_eval_return_mean) == (2000, 40.0)
    best_real_returns, best_values = seen[1]
    last_values = seen[-1][1]
    assert np.abs(best_values - last_values).max() > 1e-3  # training moved V, so the two policies are told apart
    _, loaded_values = loaded.policy.model(probe_obs)
    np.testing.assert_allclose(np.asarray(loaded_values), best_values, rtol=1e-4, atol=1e-4)
    policy = serving.traced_policy(loaded.policy, loaded.env.obs_shape)
    selection = evaluation.evaluate(policy, "CartPole-v1", 4, seed=SEED + evaluation.PERIODIC_SEED_OFFSET)
    np.testing.assert_array_equal(selection, best_real_returns)
    replayed = evaluation.evaluate(policy, "CartPole-v1", 6, seed=SEED + evaluation.FINAL_SEED_OFFSET)
    assert float(replayed.mean()) == pytest.approx(final["best"]["return_mean"])
    last = runs.load_policy(run_dir)
    assert last.env_step == 6000
    _, last_loaded_values = last.policy.model(probe_obs)
    np.testing.assert_allclose(np.asarray(last_loaded_values), last_values, rtol=1e-4, atol=1e-4)
    # One save per improvement of the running maximum (10, then 40; the tie at 4000 keeps the earlier policy).
    assert [p.name for p in (run_dir / best_policy.BEST_POLICY_DIR).glob("ckpt-*.index")] == ["ckpt-2.index"]
    other = tmp_path / "other"  # the same run config, trained without keep_best_policy
    other.mkdir()
    (other / CONFIG_FILE).write_text((run_dir / CONFIG_FILE).read_text())
    with pytest.raises(checkpoints.CheckpointError, match="has no best policy"):
        runs.load_policy(other, best=True)
