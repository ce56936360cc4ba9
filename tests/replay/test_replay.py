"""Tests for tfrl.replay: the ring buffer's bookkeeping and the n-step returns, worked out by hand."""

import numpy as np
import pytest

from tfrl.replay import TRANSITION_FIELDS, NStepBuilder, UniformReplay


def _transitions(ts):
    """Transition t: obs [t], action t, reward 10 t, discount 0.5, next_obs [t + 0.5]."""
    ts = np.asarray(ts)
    return (ts[:, None].astype(np.float32), ts.astype(np.int32), 10.0 * ts, np.full(len(ts), 0.5),
            ts[:, None] + 0.5)


# --- UniformReplay -----------------------------------------------------------------

def test_uniform_replay_wraps_around_overwriting_the_oldest():
    replay = UniformReplay(capacity=5, obs_shape=(1,), seed=0)
    replay.add(*_transitions([0, 1, 2]))
    assert (replay.cursor, replay.size) == (3, 3)

    # The second batch wraps: idx = (3 + [0, 1, 2, 3]) % 5 = [3, 4, 0, 1];
    # t0 and t1 are overwritten by t5 and t6, row 2 (t2) is now the oldest and written next.
    replay.add(*_transitions([3, 4, 5, 6]))
    assert (replay.cursor, replay.size) == (2, 5)
    np.testing.assert_array_equal(replay.action, [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(replay.obs[:, 0], [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(replay.reward, [50, 60, 20, 30, 40])
    np.testing.assert_array_equal(replay.discount, [0.5] * 5)
    np.testing.assert_array_equal(replay.next_obs[:, 0], [5.5, 6.5, 2.5, 3.5, 4.5])

    replay.add(*_transitions([7]))  # overwrites t2 at row 2
    assert (replay.cursor, replay.size) == (3, 5)
    np.testing.assert_array_equal(replay.action, [5, 6, 7, 3, 4])


def test_uniform_replay_add_exactly_capacity_fills_it():
    replay = UniformReplay(capacity=4, obs_shape=(1,), seed=0)
    replay.add(*_transitions([1, 2]))
    replay.add(*_transitions([3, 4, 5, 6]))  # idx = [2, 3, 0, 1]
    assert (replay.cursor, replay.size) == (2, 4)
    np.testing.assert_array_equal(replay.action, [5, 6, 3, 4])


def test_uniform_replay_sample_shapes_are_num_batches_by_batch_size():
    replay = UniformReplay(capacity=20, obs_shape=(3, 2), seed=0)
    obs = np.ones((6, 3, 2), np.float32)
    replay.add(obs, np.arange(6), np.zeros(6), np.ones(6), obs)
    batch = replay.sample(batch_size=4, num_batches=3)  # K=3 batches of B=4

    assert set(batch) == set(TRANSITION_FIELDS)
    assert batch["obs"].shape == (3, 4, 3, 2)
    assert batch["next_obs"].shape == (3, 4, 3, 2)
    for name in ("action", "reward", "discount"):
        assert batch[name].shape == (3, 4)
    # The dtypes the learner's input signature expects.
    assert batch["obs"].dtype == np.float32
    assert batch["action"].dtype == np.int32
    assert batch["reward"].dtype == np.float32
    assert batch["discount"].dtype == np.float32


def test_uniform_replay_samples_only_filled_rows_and_keeps_fields_aligned():
    replay = UniformReplay(capacity=100, obs_shape=(1,), seed=0)
    replay.add(*_transitions([1, 2, 3]))  # rows 0..2 filled, rows 3..99 are zeros
    batch = replay.sample(batch_size=50, num_batches=20)

    assert set(np.unique(batch["action"])) == {1, 2, 3}  # never an empty row (action 0), each row drawn
    # One index per transition for every field: obs, reward and next_obs belong to the same action.
    np.testing.assert_array_equal(batch["obs"][..., 0], batch["action"])
    np.testing.assert_array_equal(batch["reward"], 10.0 * batch["action"])
    np.testing.assert_array_equal(batch["next_obs"][..., 0], batch["action"] + 0.5)


def test_uniform_replay_sampling_is_deterministic_under_a_seed():
    def samples(seed):
        replay = UniformReplay(capacity=50, obs_shape=(1,), seed=seed)
        replay.add(*_transitions(np.arange(40)))
        return [replay.sample(batch_size=8, num_batches=2)["action"] for _ in range(3)]

    first, again, other = samples(seed=7), samples(seed=7), samples(seed=8)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_uniform_replay_sample_from_empty_buffer_raises():
    replay = UniformReplay(capacity=5, obs_shape=(1,), seed=0)
    with pytest.raises(ValueError, match="cannot sample from an empty replay buffer"):
        replay.sample(batch_size=1, num_batches=1)


def test_uniform_replay_oversize_add_raises_and_leaves_buffer_untouched():
    replay = UniformReplay(capacity=5, obs_shape=(1,), seed=0)
    with pytest.raises(ValueError, match="cannot add 6 transitions to a buffer of capacity 5"):
        replay.add(*_transitions(np.arange(1, 7)))
    assert (replay.cursor, replay.size) == (0, 0)
    np.testing.assert_array_equal(replay.action, np.zeros(5))


# --- NStepBuilder ---------------------------------------------------------------------

def _as_rows(out):
    """The builder's output as a list of (obs[0], action, reward, discount, next_obs[0]); None = no transition."""
    if out is None:
        return []
    obs, action, reward, discount, next_obs = out
    assert len({len(obs), len(action), len(reward), len(discount), len(next_obs)}) == 1
    return [(float(o[0]), int(a), float(r), float(d), float(n[0]))
            for o, a, r, d, n in zip(obs, action, reward, discount, next_obs)]


def test_nstep_n1_discount_is_gamma_zero_on_termination_gamma_on_truncation():
    builder = NStepBuilder(n=1, gamma=0.9, num_envs=4)
    obs = np.array([[0.0], [1.0], [2.0], [3.0]], np.float32)
    next_obs = obs + 10
    # env 0 runs on, env 1 terminated, env 2 was truncated by the time limit, env 3 both.
    terminated = np.array([False, True, False, True])
    truncated = np.array([False, False, True, True])
    out = builder.step(obs, np.array([0, 1, 0, 1]), np.array([1.0, 2.0, 3.0, 4.0]),
                       terminated, truncated, next_obs)
    # discount = gamma * (1 - terminated): a truncated state keeps its bootstrap value.
    assert _as_rows(out) == [
        (0.0, 0, 1.0, pytest.approx(0.9), 10.0),
        (1.0, 1, 2.0, 0.0, 11.0),
        (2.0, 0, 3.0, pytest.approx(0.9), 12.0),
        (3.0, 1, 4.0, 0.0, 13.0),  # terminated wins over truncated
    ]
    assert out[3].dtype == np.float32


def test_nstep_n3_two_envs_with_termination_and_truncation():
    """gamma = 0.5, n = 3, observations are one number so every transition can be written out.

    env 0: obs 0 -> 1 -> 2 -> 3 -> 4 (terminated at t=3, final obs 4), rewards 1, 2, 3, 4;
           then a new episode: obs 10 -> 11 with reward 5 at t=4.
    env 1: obs 100 -> 101 -> 102 (truncated at t=1, final obs 102), rewards 10, 20;
           then a new episode: obs 110 -> 111 -> 112 -> 113 with rewards 30, 40, 50.
    Actions: env 0 takes t, env 1 takes 10 + t.
    """
    builder = NStepBuilder(n=3, gamma=0.5, num_envs=2)
    steps = [  # (obs, reward, terminated, truncated, stored next_obs) per env, t = 0..4
        ((0, 100), (1, 10), (False, False), (False, False), (1, 101)),
        ((1, 101), (2, 20), (False, False), (False, True), (2, 102)),
        ((2, 110), (3, 30), (False, False), (False, False), (3, 111)),
        ((3, 111), (4, 40), (True, False), (False, False), (4, 112)),
        ((10, 112), (5, 50), (False, False), (False, False), (11, 113)),
    ]
    emitted = []
    for t, (obs, reward, terminated, truncated, next_obs) in enumerate(steps):
        out = builder.step(np.array(obs, np.float32)[:, None], np.array([t, 10 + t]),
                           np.array(reward, np.float64), np.array(terminated), np.array(truncated),
                           np.array(next_obs, np.float32)[:, None])
        emitted.append(_as_rows(out))

    assert emitted[0] == []  # nothing has n steps yet, no episode ended
    # t=1, env 1 truncated with 2 pending: flush both, keeping the bootstrap (discount gamma^k).
    #   from 100: R = 10 + 0.5*20 = 20, discount 0.5^2 = 0.25, next obs = final obs 102
    #   from 101: R = 20,               discount 0.5,             next obs 102
    assert emitted[1] == [(100.0, 10, 20.0, 0.25, 102.0), (101.0, 11, 20.0, 0.5, 102.0)]
    # t=2, env 0 has 3 pending: from 0: R = 1 + 0.5*2 + 0.25*3 = 2.75, discount 0.5^3 = 0.125, next obs 3.
    assert emitted[2] == [(0.0, 0, 2.75, 0.125, 3.0)]
    # t=3, env 0 terminated with 3 pending (starts 1, 2, 3): flush all with discount 0, next obs = final obs 4.
    #   from 1: R = 2 + 0.5*3 + 0.25*4 = 4.5;  from 2: R = 3 + 0.5*4 = 5;  from 3: R = 4.
    # env 1 has only 2 pending in its new episode: nothing.
    assert emitted[3] == [(1.0, 1, 4.5, 0.0, 4.0), (2.0, 2, 5.0, 0.0, 4.0), (3.0, 3, 4.0, 0.0, 4.0)]
    # t=4, env 0 restarted (1 pending); env 1 has 3 pending from 110:
    #   R = 30 + 0.5*40 + 0.25*50 = 62.5, discount 0.125, next obs 113.
    assert emitted[4] == [(110.0, 12, 62.5, 0.125, 113.0)]


def test_nstep_output_dtypes_fit_the_replay():
    builder = NStepBuilder(n=2, gamma=0.5, num_envs=1)
    obs = np.zeros((1, 3), np.float32)
    builder.step(obs, np.array([1]), np.array([1.0]), np.array([False]), np.array([False]), obs + 1)
    out = builder.step(obs + 1, np.array([0]), np.array([2.0]), np.array([False]), np.array([False]), obs + 2)
    obs_out, action, reward, discount, next_obs = out
    assert obs_out.shape == (1, 3) and next_obs.shape == (1, 3)
    assert action.dtype == np.int32 and reward.dtype == np.float32 and discount.dtype == np.float32
    # R = 1 + 0.5*2 = 2, discount 0.25; the first step's obs and action, the last step's next obs.
    assert (int(action[0]), float(reward[0]), float(discount[0])) == (1, 2.0, 0.25)
    np.testing.assert_array_equal(obs_out, np.zeros((1, 3)))
    np.testing.assert_array_equal(next_obs, np.full((1, 3), 2.0))

    replay = UniformReplay(capacity=4, obs_shape=(3,), seed=0)
    replay.add(*out)
    assert replay.size == 1


def test_the_fields_that_can_hold_nan_are_found_once_also_inside_structured_and_subarray_dtypes():
    from tfrl.models import numerics

    structured = np.dtype([("camera", np.uint8, (2, 2)), ("joints", np.float32, (3,)), ("count", np.int32)])
    assert numerics.can_hold_nonfinite(structured)  # "joints" is a subarray field: its own kind is void
    assert numerics.can_hold_nonfinite(np.dtype((np.float32, (3,))))
    assert not numerics.can_hold_nonfinite(np.dtype([("camera", np.uint8, (2, 2)), ("count", np.int32)]))
    replay = UniformReplay(4, (), seed=0, obs_dtype=structured)
    assert replay._may_be_nonfinite == ["obs", "reward", "discount", "next_obs"]  # not the int32 actions
    obs = np.zeros(1, structured)
    obs["joints"][0, 1] = np.nan
    with pytest.raises(Exception, match="non-finite observation"):
        replay.add(obs, np.zeros(1, np.int32), np.ones(1, np.float32), np.ones(1, np.float32), np.zeros(1, structured))
    assert replay.size == 0
