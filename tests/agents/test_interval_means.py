"""A log record's train metrics: the means over the train calls of its interval (tfrl.agents.interval_means)."""

import math

import pytest

import tfrl
from tfrl.agents.interval_means import IntervalMeans
from tfrl.run.metrics import read_metrics


def test_a_record_shows_each_metrics_mean_over_its_calls_and_the_newest_schedule_value():
    means = IntervalMeans(latest=["learning_rate"])
    means.add({"loss": 1.0, "learning_rate": 3e-4})
    means.add({"loss": 4.0, "learning_rate": 2e-4})
    means.add({"loss": 7.0, "learning_rate": 1e-4})
    assert means.take() == {"loss": 4.0, "learning_rate": 1e-4}  # (1 + 4 + 7) / 3
    means.add({"loss": 10.0, "learning_rate": 5e-5})
    assert means.take() == {"loss": 10.0, "learning_rate": 5e-5}  # the next interval starts empty


def test_an_interval_without_a_call_shows_the_previous_records_values_and_nan_before_any():
    means = IntervalMeans(initial={"loss": float("nan")})
    assert math.isnan(means.take()["loss"])
    means.add({"loss": 2.0})
    assert means.take() == {"loss": 2.0}
    assert means.take() == {"loss": 2.0}


def test_a_metric_absent_from_some_calls_is_averaged_over_the_calls_that_have_it():
    means = IntervalMeans()
    means.add({"critic_loss": 1.0})
    means.add({"critic_loss": 3.0, "actor_loss": 5.0})
    assert means.take() == {"critic_loss": 2.0, "actor_loss": 5.0}


def test_a_checkpoint_between_two_records_keeps_the_interval_so_far():
    before = IntervalMeans()
    before.add({"loss": 1.0})
    assert before.take() == {"loss": 1.0}
    before.add({"loss": 2.0})
    resumed = IntervalMeans()
    resumed.restore(before.state())
    resumed.add({"loss": 6.0})
    assert resumed.take() == {"loss": 4.0}  # (2 + 6) / 2: the call before the checkpoint counts


def test_a_checkpoint_from_before_interval_means_restores_its_last_metrics():
    means = IntervalMeans()
    means.restore({"loss": 0.5, "q_mean": 12.0})
    assert means.take() == {"loss": 0.5, "q_mean": 12.0}


@pytest.mark.parametrize("state", [
    {"shown": {}, "sums": {"loss": 1.0}, "counts": {}},
    {"shown": {}, "sums": {"loss": 1.0}, "counts": {"loss": 0}},
])
def test_a_checkpoint_with_sums_that_do_not_match_their_counts_is_refused(state):
    with pytest.raises(ValueError, match="interval metrics"):
        IntervalMeans().restore(state)


def test_ppos_record_over_two_updates_is_the_mean_of_the_records_of_each(tmp_path):
    """The same PPO run logged after every update and after every second one: each record of the second is the
    mean of the two records of the first that it covers, and shows the newest learning rate and clip range."""
    rollout = 4 * 32  # num_envs * rollout_length: one update
    hp = {"total_env_steps": 4 * rollout, "num_envs": 4, "rollout_length": 32, "batch_size": 64, "n_epochs": 2,
          "hidden_sizes": [16, 16], "lr_schedule": "linear", "clip_range_schedule": "linear",
          "eval_interval": 0, "checkpoint_interval": 0, "final_eval_episodes": 1}
    records = {}
    for interval in (rollout, 2 * rollout):
        run = tfrl.train("ppo", "CartPole-v1", hp={**hp, "log_interval": interval}, preset="none", seed=1,
                         run_dir=tmp_path / str(interval), export=False, verbose=0)
        records[interval] = [r for r in read_metrics(run.run_dir / "metrics.jsonl") if r["kind"] == "train"]
    each, pairs = records[rollout], records[2 * rollout]
    assert [r["env_step"] for r in each] == [rollout, 2 * rollout, 3 * rollout, 4 * rollout]
    assert [r["env_step"] for r in pairs] == [2 * rollout, 4 * rollout]
    for pair, (first, second) in zip(pairs, [each[0:2], each[2:4]]):
        for name in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm"):
            assert pair[name] == pytest.approx((first[name] + second[name]) / 2, rel=1e-6, abs=1e-9), name
        assert first["learning_rate"] != second["learning_rate"]  # the schedules moved between the two updates
        assert pair["learning_rate"] == second["learning_rate"] and pair["clip_range"] == second["clip_range"]
