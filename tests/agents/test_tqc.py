"""Tests for TQC (tfrl.agents.tqc): the truncated target, the critics' and the actor's losses by hand, a learner
update against the same math written out in NumPy, and a short run that trains, resumes, evaluates and exports."""

import json

import numpy as np
import pytest
import tensorflow as tf

import tfrl
from tfrl.agents.sac.learning import squashed_gaussian
from tfrl.agents.tqc.config import TQCConfig
from tfrl.agents.tqc.learning import TQCLearner, actor_loss, critic_loss, truncated_targets
from tfrl.envs import EnvInfo
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import serving
from tfrl.run import launch

PENDULUM = EnvInfo(env_id="Pendulum-v1", obs_shape=(3,), num_actions=0, action_shape=(1,), action_low=(-2.0,),
                   action_high=(2.0,))


def test_the_target_keeps_the_smallest_pooled_quantiles():
    # Two critics of 2 quantiles at (s', a'): [1, 5] and [2, 3]; pooled and sorted [1, 2, 3, 5]; d = 1 per critic
    # keeps 2 * (2 - 1) = 2 atoms: [1, 2]. r = 1, discount 0.5, log pi(a'|s') = 2, alpha 0.5:
    # y = 1 + 0.5 * ([1, 2] - 0.5 * 2) = [1, 1.5]
    y = truncated_targets(tf.constant([1.0]), tf.constant([0.5]), tf.constant([[[1.0, 5.0], [2.0, 3.0]]]),
                          tf.constant([2.0]), tf.constant(0.5), kept=2)
    np.testing.assert_allclose(y.numpy(), [[1.0, 1.5]])
    # Nothing dropped: all four atoms, ascending: 1 + 0.5 * ([1, 2, 3, 5] - 1)
    y = truncated_targets(tf.constant([1.0]), tf.constant([0.5]), tf.constant([[[1.0, 5.0], [2.0, 3.0]]]),
                          tf.constant([2.0]), tf.constant(0.5), kept=4)
    np.testing.assert_allclose(y.numpy(), [[1.0, 1.5, 2.0, 3.0]])


def test_the_critic_loss_by_hand():
    # Critics [0, 1] and [1, 2] (tau 1/4, 3/4), target atoms [1, 1.5]; rho = w * huber(u), u = y_j - theta_i:
    #   critic 1: theta 0: u [1, 1.5], w 0.25, huber [0.5, 1]    -> [0.125, 0.25]
    #             theta 1: u [0, 0.5], w 0.75, huber [0, 0.125]  -> [0, 0.09375]
    #   critic 2: theta 1: u [0, 0.5], w 0.25, huber [0, 0.125]  -> [0, 0.03125]
    #             theta 2: u [-1, -0.5], w 0.25, huber [0.5, 0.125] -> [0.125, 0.03125]
    # the mean of the 8: 0.65625 / 8 = 0.08203125 (sb3-contrib's sum_over_quantiles=False)
    z = tf.Variable([[[0.0, 1.0], [1.0, 2.0]]])
    targets = tf.Variable([[1.0, 1.5]])
    with tf.GradientTape() as tape:
        loss = critic_loss(z, targets)
    assert float(loss) == pytest.approx(0.08203125, rel=1e-6)
    assert tape.gradient(loss, targets) is None


def test_the_actor_loss_is_the_temperature_term_less_the_mean_of_every_quantile():
    # Rows' quantiles [[1, 3], [2, 2]] and [[0, 0], [4, 4]]: means 2 and 2; log pi [1, 3], alpha 0.5:
    # mean([0.5 - 2, 1.5 - 2]) = -1
    z = tf.constant([[[1.0, 3.0], [2.0, 2.0]], [[0.0, 0.0], [4.0, 4.0]]])
    assert float(actor_loss(tf.constant([1.0, 3.0]), z, 0.5)) == pytest.approx(-1.0)


def test_the_config_refuses_what_has_no_meaning():
    for bad, message in [({"num_critics": 0}, "num_critics must be in"),
                         ({"num_quantiles": 0}, "num_quantiles must be in"),
                         ({"top_quantiles_to_drop_per_net": 25}, r"must be in \[0, num_quantiles\)"),
                         ({"top_quantiles_to_drop_per_net": -1}, r"must be in \[0, num_quantiles\)")]:
        with pytest.raises(ValueError, match=message):
            TQCConfig(**bad)
    assert TQCConfig(num_critics=3, num_quantiles=5, top_quantiles_to_drop_per_net=2).kept_target_quantiles == 9


def _np_rho_mean(theta, targets):
    """mean over critics, quantiles and atoms of the quantile Huber loss (kappa 1), float64, by loops."""
    num_quantiles = theta.shape[-1]
    total, count = 0.0, 0
    for row, atoms in zip(theta, targets):
        for critic in row:
            for i, q in enumerate(critic):
                tau = (2 * i + 1) / (2 * num_quantiles)
                for y in atoms:
                    u = y - q
                    huber = 0.5 * u * u if abs(u) <= 1 else abs(u) - 0.5
                    total += abs(tau - (u < 0)) * huber
                    count += 1
    return total / count


def test_an_update_reports_the_loss_of_the_numpy_math_before_its_step():
    config = TQCConfig(hidden_sizes=(8,), batch_size=4, num_critics=3, num_quantiles=5,
                       top_quantiles_to_drop_per_net=2, initial_temperature=0.5)
    learner = TQCLearner(config, PENDULUM, Runtime(options=RuntimeOptions(), device_name="/device:CPU:0"))
    rng = np.random.default_rng(0)
    b = {"obs": rng.normal(size=(4, 3)), "action": rng.uniform(-1, 1, size=(4, 1)), "reward": rng.normal(size=4),
         "discount": np.array([0.99, 0.0, 0.99, 0.99]), "next_obs": rng.normal(size=(4, 3)),
         "noise_next": rng.normal(size=(4, 1)), "noise": rng.normal(size=(4, 1))}
    b = {name: value.astype(np.float32) for name, value in b.items()}
    mean, log_std = np.split(learner.actor(b["next_obs"]).numpy(), 2, axis=-1)
    next_action, next_log_prob = (t.numpy() for t in squashed_gaussian(mean, log_std, b["noise_next"]))
    pooled = np.concatenate([t([b["next_obs"], next_action]).numpy() for t in learner.target_critics], axis=1)
    kept = np.sort(pooled, axis=1)[:, :3 * (5 - 2)]  # 9 of 15
    y = b["reward"][:, None] + b["discount"][:, None] * (kept - 0.5 * next_log_prob[:, None])
    theta = np.stack([c([b["obs"], b["action"]]).numpy() for c in learner.critics], axis=1)  # [4, 3, 5]
    update = learner.update({name: value[None] for name, value in b.items()})
    assert update.metrics["critic_loss"] == pytest.approx(_np_rho_mean(theta, y), rel=1e-5)
    assert update.metrics["q_mean"] == pytest.approx(theta.mean(), rel=1e-5)
    assert update.metrics["temperature"] == pytest.approx(0.5)
    assert int(learner.gradient_steps.numpy()) == 1
    assert sorted(learner.checkpoint_items()) == sorted(
        ["actor", "q1", "q2", "q3", "q1_target", "q2_target", "q3_target", "log_alpha", "actor_optimizer",
         "critic_optimizer", "temperature_optimizer", "gradient_steps"])


HP = {"total_env_steps": 1500, "learning_starts": 300, "hidden_sizes": "32", "batch_size": 64, "num_quantiles": 10,
      "train_period_env_steps": 50, "gradient_steps_per_train": 50, "eval_interval": 0, "final_eval_episodes": 2,
      "checkpoint_interval": 500, "log_interval": 500}


def test_a_short_run_trains_resumes_and_exports_a_box_policy(tmp_path):
    run_dir = tmp_path / "run"
    polls = []
    prepared = launch.prepare(launch.TrainRequest(agent="tqc", env="Pendulum-v1", preset="none", hp=HP,
                                                  run_dir=run_dir))
    stopped = launch.execute(prepared, stop_requested=lambda: polls.append(1) or len(polls) > 700)
    assert stopped.record["kind"] == "stopped" and stopped.record["env_step"] == 700
    run = tfrl.train("tqc", "Pendulum-v1", preset="none", hp=HP, run_dir=run_dir, verbose=0)
    assert run.complete and run.result["env_step"] == 1500
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {"kind": "resume", "env_step": 700} in records
    # train calls at 300, 350, ..., 1500: 25 calls of 50 gradient steps
    assert run.result["gradient_steps"] == 25 * 50
    train = [r for r in records if r["kind"] == "train"]
    assert all(np.isfinite(r["critic_loss"]) and "temperature" in r for r in train)
    policy = serving.load(run.saved_model)
    obs = np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32)
    actions = policy.policy(obs)
    assert actions.shape == (8, 1) and np.all(np.abs(actions) <= 2.0)
    np.testing.assert_allclose(tfrl.load_policy(run_dir)(obs), actions, rtol=1e-6)


@pytest.mark.slow
def test_the_pendulum_preset_swings_the_pendulum_up(tmp_path):
    # Random torques score about -1200 on Pendulum; tqc-pendulum's 20k env steps reach above -250 (docs/benchmarks.md).
    run = tfrl.train("tqc", "Pendulum-v1", run_dir=tmp_path / "run", verbose=0, hp={"final_eval_episodes": 20})
    assert run.result["return_mean"] > -250, run.result
