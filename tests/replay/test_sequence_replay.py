"""tfrl.replay.sequences: the rows an env's steps become, the windows and their n-step targets by hand, rings that
wrap, the checkpoint, and what is refused."""

import numpy as np
import pytest

from tfrl.models.numerics import NonFiniteError
from tfrl.replay.sequences import SequenceReplay

GAMMA = 0.5


def _replay(capacity=20, num_envs=1, **window):
    window = {"burn_in": 1, "sequence_length": 2, "n_step": 2, **window}
    return SequenceReplay(capacity, num_envs, (1,), state_size=2, seed=0, gamma=GAMMA, **window)


def _step(replay, obs, reward, action=0, start=False, terminated=False, truncated=False, final_obs=0.0):
    """One step of one env; its state is [obs, -obs] and its state after the step [final_obs, 0]."""
    replay.add(np.array([[obs]]), np.array([[obs, -obs]]), np.array([action]), np.array([reward]),
               np.array([start]), np.array([terminated]), np.array([truncated]), np.array([[final_obs]]),
               np.array([[final_obs, 0.0]]))


def _three_episodes():
    """Rows: 0 obs 1 (start) r 1 | 1 obs 2 r 2 | 2 obs 3 r 4, truncated | 3 obs 3.5 final (cut)
             4 obs 10 (start) r 8 | 5 obs 11 r 16, terminated | 6 obs 11.5 final (terminal)
             7 obs 20 (start) r 32 | 8 obs 21 r 64"""
    replay = _replay()
    _step(replay, 1, 1, start=True)
    _step(replay, 2, 2, action=1)
    _step(replay, 3, 4, truncated=True, final_obs=3.5)
    _step(replay, 10, 8, action=1, start=True)
    _step(replay, 11, 16, terminated=True, final_obs=11.5)
    _step(replay, 20, 32, action=1, start=True)
    _step(replay, 21, 64)
    return replay


# Windows of burn_in 1 + sequence_length 2 + n_step 2 = 5 rows; gamma 0.5. By the first row's observation, each
# window's two trained rows (positions 1 and 2): (n-step return, discount, bootstrap row counted from position 1,
# valid).
#   from row 0: row 1: 2 + 0.5 * 4 = 4, then row 3 ends the cut episode: bootstrap row 3 (position 3 -> 2),
#                      discount 0.5^2 = 0.25;  row 2: 4, bootstrap row 3 at once, discount 0.5
#   from row 1: row 2 as above (bootstrap position 2 -> 1);  row 3 is final: not trained on
#   from row 2: row 3 final;  row 4: 8 + 0.5 * 16 = 16, bootstraps from row 6, terminal: discount 0
#   from row 3 (3.5): row 4 as above (position 3 -> 2);  row 5: 16, bootstraps from row 6 at once, discount 0
#   from row 4 (10): row 5 (position 2 -> 1);  row 6 final
EXPECTED = {
    1.0: ([4.0, 4.0], [0.25, 0.5], [2, 2], [1, 1]),
    2.0: ([4.0, None], [0.5, None], [1, None], [1, 0]),
    3.0: ([None, 16.0], [None, 0.0], [None, 3], [0, 1]),
    3.5: ([16.0, 16.0], [0.0, 0.0], [2, 2], [1, 1]),
    10.0: ([16.0, None], [0.0, None], [1, None], [1, 0]),
}


def test_the_rows_of_three_episodes():
    replay = _three_episodes()
    np.testing.assert_array_equal(replay.obs[0, :9, 0], [1, 2, 3, 3.5, 10, 11, 11.5, 20, 21])
    np.testing.assert_array_equal(replay.start[0, :9], [1, 0, 0, 0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(replay.final[0, :9], [0, 0, 0, 1, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(replay.terminal[0, :9], [0, 0, 0, 0, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(replay.state[0, [2, 3], 0], [3, 3.5])  # a final row keeps the state after the step
    assert replay.windows == 9 - 5 + 1 and replay.size == 2 * replay.windows  # size: their trained steps


def test_every_window_has_its_hand_computed_n_step_targets():
    replay = _three_episodes()
    batch = replay.sample(batch_size=2 * 200, num_batches=2)  # 200 windows per batch (2 trained rows each)
    assert batch["obs"].shape == (2, 200, 5, 1) and batch["state"].shape == (2, 200, 2)
    firsts = batch["obs"][..., 0, 0].reshape(-1)
    assert set(firsts) == set(EXPECTED)
    flat = {name: batch[name].reshape(400, -1) for name in ("return", "discount", "bootstrap", "valid", "state")}
    for i, first in enumerate(firsts):
        returns, discounts, bootstraps, valid = EXPECTED[first]
        np.testing.assert_array_equal(flat["valid"][i], valid)
        np.testing.assert_array_equal(flat["state"][i], [first, -first] if first != 3.5 else [3.5, 0.0])
        for row in np.flatnonzero(valid):
            assert flat["return"][i, row] == returns[row]
            assert flat["discount"][i, row] == discounts[row]
            assert flat["bootstrap"][i, row] == bootstraps[row]


def test_windows_of_a_ring_that_wrapped_are_consecutive_and_recent():
    replay = _replay(capacity=8, burn_in=2, sequence_length=2, n_step=1)
    for t in range(13):
        _step(replay, t, 1.0, start=t == 0)
    assert replay.windows == 8 - 5 + 1
    obs = replay.sample(batch_size=2 * 50, num_batches=1)["obs"][0, :, :, 0]
    np.testing.assert_array_equal(np.diff(obs, axis=-1), 1.0)
    assert obs.min() == 13 - 8 and obs.max() == 12


def test_windows_come_from_every_env_and_stay_in_one():
    replay = _replay(num_envs=2, capacity=40)
    for t in range(10):
        replay.add(np.array([[t], [100 + t]]), np.zeros((2, 2)), np.zeros(2), np.ones(2), np.array([t == 0] * 2),
                   np.zeros(2, bool), np.zeros(2, bool), np.zeros((2, 1)), np.zeros((2, 2)))
    obs = replay.sample(batch_size=2 * 100, num_batches=1)["obs"][0, :, :, 0]
    assert (obs[:, 0] < 100).any() and (obs[:, 0] >= 100).any()
    np.testing.assert_array_equal(np.diff(obs, axis=-1), 1.0)


def test_a_nan_row_is_refused_and_nothing_is_written():
    replay = _three_episodes()
    before = replay.obs.copy(), replay.cursor.copy()
    with pytest.raises(NonFiniteError, match="observation"):
        _step(replay, float("nan"), 1.0)
    with pytest.raises(NonFiniteError, match="reward"):
        _step(replay, 1.0, float("inf"))
    with pytest.raises(NonFiniteError, match="observation"):  # the episode's last observation
        _step(replay, 1.0, 1.0, terminated=True, final_obs=float("nan"))
    np.testing.assert_array_equal(replay.obs, before[0])
    np.testing.assert_array_equal(replay.cursor, before[1])


def test_the_checkpoint_restores_the_rings_and_ends_the_episode_in_flight():
    replay = _three_episodes()
    arrays, state = replay.checkpoint_state()
    restored = _replay()
    restored.restore_checkpoint_state({name: value.copy() for name, value in arrays.items()}, state)
    np.testing.assert_array_equal(restored.obs, replay.obs)
    assert restored.size == replay.size and list(restored.cursor) == [9]
    # The resumed run starts a fresh episode: the last stored row (obs 21) becomes the end of a cut episode.
    np.testing.assert_array_equal(restored.final[0, :9], [0, 0, 0, 1, 0, 0, 1, 0, 1])
    assert not restored.terminal[0, 8]
    a, b = replay.sample(10, 3), restored.sample(10, 3)  # the sampling RNG continues
    np.testing.assert_array_equal(a["obs"], b["obs"])
    with pytest.raises(ValueError, match="capacity 30 of 1 envs != the checkpoint's 20 of 1"):
        _replay(capacity=30).restore_checkpoint_state(arrays, state)


def test_a_window_longer_than_a_ring_is_refused():
    with pytest.raises(ValueError, match="a window of 11 rows does not fit a ring of 10"):
        _replay(capacity=20, num_envs=2, burn_in=4, sequence_length=5, n_step=2)
