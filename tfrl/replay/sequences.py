"""A replay of every env's steps in time order, sampled as fixed-length windows: the replay of agents with memory
(R2D2, Kapturowski et al. 2019).

Each env has its own ring of rows. A row is an observation the actor read, the recurrent state it held before
reading it (zeros at an episode's first row), and what followed: the action and the reward; or, for an episode's
last observation, no action and whether the episode terminated (no bootstrap) or was cut (bootstrap):

    row:  obs  state  action  reward  start  final  terminal

A window is burn_in + sequence_length + n_step_return consecutive rows of one env, drawn uniformly among the
windows the rings hold. The learner runs its network along the window from the stored state of the first row
(zeroing it where an episode starts inside the window), lets the burn-in rows only warm the state, and trains on
the sequence_length rows after them. A trained row t's target is its n-step return inside the window:

    return_t = sum_{k < m} gamma^k r_{t+k},  bootstrap row t + m,  discount = gamma^m (0 if that row terminated)

where m = n_step_return, or fewer where the episode's last row comes first. A window may cross the end of an
episode: the next episode's rows start from a zero state. A final row is trained on by no one (it has no action).

A row with a NaN or Inf in a float field is refused as it is added (tfrl.models.numerics.NonFiniteError).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tfrl.models import numerics

ROW_FIELDS = ("obs", "state", "action", "reward", "start", "final", "terminal")
_CHECKED = {"obs": "observation", "state": "recurrent state", "action": "action", "reward": "reward"}


class SequenceReplay:
    """Per-env rings of rows (capacity // num_envs rows each; the oldest are overwritten first), sampled as windows
    (see the module docstring)."""

    def __init__(self, capacity: int, num_envs: int, obs_shape: Sequence[int], state_size: int, seed: int, *,
                 burn_in: int, sequence_length: int, n_step: int, gamma: float, obs_dtype="float32",
                 action_shape: Sequence[int] = (), action_dtype=np.int32):
        self.capacity = capacity
        self.ring = capacity // num_envs  # rows kept of each env
        self.window = burn_in + sequence_length + n_step
        if self.window > self.ring:
            raise ValueError(f"a window of {self.window} rows does not fit a ring of {self.ring}")
        self.burn_in, self.sequence_length, self.n_step, self.gamma = burn_in, sequence_length, n_step, gamma
        shape = (num_envs, self.ring)
        self.obs = np.zeros((*shape, *obs_shape), obs_dtype)
        self.state = np.zeros((*shape, state_size), np.float32)
        self.action = np.zeros((*shape, *action_shape), action_dtype)
        self.reward = np.zeros(shape, np.float32)
        self.start = np.zeros(shape, bool)
        self.final = np.zeros(shape, bool)
        self.terminal = np.zeros(shape, bool)
        self.cursor = np.zeros(num_envs, np.int64)  # each ring's next row
        self.rows = np.zeros(num_envs, np.int64)  # each ring's rows written, at most `ring`
        self._rng = np.random.default_rng(seed)

    @property
    def windows(self) -> int:
        """The windows one can sample."""
        return int(np.maximum(self.rows - self.window + 1, 0).sum())

    @property
    def size(self) -> int:
        """What a batch_size is compared with (tfrl.agents.off_policy.training): the trained steps of the windows
        one can sample, windows x sequence_length."""
        return self.windows * self.sequence_length

    def add(self, obs, state, action, reward, start, terminated, truncated, final_obs, final_state) -> None:
        """One vector step of N = num_envs envs: the row each env acted on, and for the envs whose episode ended
        (terminated or truncated) its last row (final_obs, final_state: the state after the step). Refused whole
        (NonFiniteError) if a float field holds a NaN or Inf."""
        done = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        rows = self._checked(obs=obs, state=state, action=action, reward=reward)
        ended = np.flatnonzero(done)
        last = self._checked(obs=np.asarray(final_obs)[ended], state=np.asarray(final_state)[ended])  # before writing
        self._write(np.arange(len(done)), **rows, start=np.asarray(start, bool), final=False, terminal=False)
        if len(ended):
            self._write(ended, **last, action=0, reward=0.0, start=False, final=True,
                        terminal=np.asarray(terminated, bool)[ended])

    def _checked(self, **fields) -> dict[str, np.ndarray]:
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow to Inf is reported below
            stored = {name: np.asarray(value, getattr(self, name).dtype) for name, value in fields.items()}
        bad = [_CHECKED[name] for name, value in stored.items() if not numerics.all_finite(value)]
        if bad:
            raise numerics.NonFiniteError.entering_replay(bad)
        return stored

    def _write(self, envs: np.ndarray, **values) -> None:
        where = (envs, self.cursor[envs])
        for name, value in values.items():
            getattr(self, name)[where] = value
        self.cursor[envs] = (self.cursor[envs] + 1) % self.ring
        self.rows[envs] = np.minimum(self.rows[envs] + 1, self.ring)

    def sample(self, batch_size: int, num_batches: int) -> dict[str, np.ndarray]:
        """num_batches batches of batch_size / sequence_length windows, drawn uniformly with replacement:
        obs [K, C, W, ...], state [K, C, S] (the first row's), start [K, C, W], and of the L trained rows action,
        return, discount [K, C, L], bootstrap [K, C, L] (the row bootstrapped from, counted from the first trained
        row) and valid [K, C, L] (1 where the row has an action)."""
        windows = np.maximum(self.rows - self.window + 1, 0)
        if not windows.sum():
            raise ValueError("the replay holds no whole window yet")
        drawn = self._rng.integers(0, windows.sum(), size=(num_batches, batch_size // self.sequence_length))
        env = np.searchsorted(np.cumsum(windows), drawn, side="right")  # [K, C]
        offset = drawn - (np.cumsum(windows) - windows)[env]
        oldest = np.where(self.rows == self.ring, self.cursor, 0)[env]
        rows = (oldest + offset)[..., None] + np.arange(self.window)  # [K, C, W]
        where = (env[..., None], rows % self.ring)
        trained = (env[..., None], where[1][..., self.burn_in:self.burn_in + self.sequence_length])
        return {"obs": self.obs[where], "state": self.state[env, where[1][..., 0]],
                "start": self.start[where].astype(np.float32), "action": self.action[trained],
                **self._targets(self.reward[where], self.final[where], self.terminal[where])}

    def _targets(self, reward: np.ndarray, final: np.ndarray, terminal: np.ndarray) -> dict[str, np.ndarray]:
        """The trained rows' n-step returns inside their windows (see the module docstring); [K, C, W] in."""
        t = self.burn_in + np.arange(self.sequence_length)  # the trained rows' positions in the window
        returns = np.zeros(final.shape[:-1] + (len(t),), np.float32)
        bootstrap = np.broadcast_to(t + 1, returns.shape).copy()
        ended = np.zeros(returns.shape, bool)  # the episode's last row came before step k
        for k in range(self.n_step):
            returns += np.where(ended, 0.0, self.gamma ** k * reward[..., t + k]).astype(np.float32)
            bootstrap = np.where(ended, bootstrap, t + k + 1)
            ended |= final[..., t + k + 1]
        steps = bootstrap - t
        landed_terminal = np.take_along_axis(terminal, bootstrap, axis=-1)
        discount = np.where(landed_terminal, 0.0, self.gamma ** steps).astype(np.float32)
        return {"return": returns, "discount": discount, "bootstrap": (bootstrap - self.burn_in).astype(np.int32),
                "valid": (~final[..., t]).astype(np.float32)}

    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """(arrays, JSON-able state): every ring, their cursors and fill, the sampling RNG."""
        arrays = {name: getattr(self, name) for name in ROW_FIELDS}
        state = {"cursor": self.cursor.tolist(), "rows": self.rows.tolist(), "capacity": self.capacity,
                 "window": self.window, "rng": self._rng.bit_generator.state}
        return arrays, state

    def restore_checkpoint_state(self, arrays: dict[str, np.ndarray], state: dict) -> None:
        """Inverse of checkpoint_state, into a replay of the same shape. The resumed run starts fresh episodes, so
        each ring's last row is made the last row of a cut episode: the row before it bootstraps from it."""
        if state["capacity"] != self.capacity or len(state["cursor"]) != len(self.cursor):
            raise ValueError(f"replay capacity {self.capacity} of {len(self.cursor)} envs != the checkpoint's "
                             f"{state['capacity']} of {len(state['cursor'])}")
        for name in ROW_FIELDS:
            getattr(self, name)[...] = arrays[name]
        self.cursor = np.asarray(state["cursor"], np.int64)
        self.rows = np.asarray(state["rows"], np.int64)
        self._rng.bit_generator.state = state["rng"]
        written = np.flatnonzero(self.rows)
        last = (written, (self.cursor[written] - 1) % self.ring)
        self.final[last] |= True  # a final row already stays as it was (terminal or not)
