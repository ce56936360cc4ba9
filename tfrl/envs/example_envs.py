"""Small example envs for problems with structure (Dict observations, action masks, MultiDiscrete, MultiBinary
and hybrid actions), each with an optimal return known exactly, so that tests and benchmarks can compare a
trained agent with the best possible. Pure NumPy; all randomness comes from reset(seed=...). Every env ends its
episodes itself (its time limit is a truncation) and puts the episode's optimal return in reset's info
("optimal_return").

    tfrl/GoalGrid-v0    Dict observation {"position": Box(0, 1, (2,)) (the agent's row and column / (N - 1)),
                        "goal": Discrete(N * N) (the goal's cell, row * N + column), "steps_left": Box(0, 1, (1,))
                        (steps left / the time limit)}; Discrete(4) actions (0 up, 1 down, 2 left, 3 right; a move
                        into a wall stays). An N x N grid (size=5), the agent and the goal on distinct random cells.
                        Reward +1 on the step that reaches the goal (the episode terminates), -0.05 on every other
                        step; truncated after 4N steps. Optimal return: 1 - 0.05 (d - 1) for the Manhattan distance
                        d between start and goal (goal_grid_optimal_return); over starts, 1 - 0.05 (2N/3 - 1)
                        (goal_grid_mean_optimal_return: the mean distance between distinct cells is 2N/3).
    tfrl/GoalPoint-v0   Dict observation {"position": Box(-1, 1, (2,)), "goal": Box(-1, 1, (2,))}, both uniform in
                        the square; Box(-1, 1, (2,)) actions: the point moves by max_step (0.1) times the action,
                        scaled down to norm 1 if longer, and stays in the square. Reward: minus the distance to the
                        goal after the move; truncated after 50 steps. Optimal return (going straight at full
                        speed, then staying): -sum over t = 1..50 of max(0, d - 0.1 t) for the start distance d
                        (goal_point_optimal_return); no policy does better, as no point reachable in t steps is
                        closer than d - 0.1 t.
    tfrl/MaskedPick-v0  Dict observation {"state": Box(0, 1, (K,)) (each action's payoff, 0 or 1), "action_mask":
                        Box(0, 1, (K,), int8) (1 = legal)}; Discrete(K) actions (K=10); the mask is also
                        action_masks() (bool). Each step 1 to max_legal (3) random actions are legal; one of them
                        pays 1, the other legal ones 0, and a legal action's reward is its payoff. Illegal actions
                        show decoy payoffs (1 with probability 1/2), so only the mask tells which 1 can be taken: an
                        agent that masks reads each legal action's reward in the state; one that does not has to
                        learn the mask's effect from it as an input, and loses its episode on an illegal action: -1,
                        terminated (illegal="penalty"; or illegal="raise": ValueError, for checking that an agent
                        masks). Truncated after 20 steps. Optimal return: 20. mask_key="legal" (any other key)
                        makes the mask an ordinary input, with no action_masks() method: for training without
                        masking on the same problem.
    tfrl/RecallPick-v0  Masks with memory. Dict observation {"cue": Box(0, 1, (K,)) (one-hot on the first step, zeros
                        after), "action_mask": Box(0, 1, (K,), int8)}; Discrete(K) actions (K=4), the mask also
                        action_masks(). The first step shows the cue (every action legal, reward 0); on each of the
                        horizon - 1 (7) recall steps that follow, 2 random actions are legal, and the cue pays 1 when
                        it is one of them, the other legal action 0; an illegal action ends the episode at -1
                        (illegal="raise": ValueError). Optimal return: the recall steps whose legal pair holds the
                        cue (in reset's info; 3.5 on average). A policy without memory sees two legal actions and
                        cannot tell the cue: half of that at best (1.75 on average); one that does not mask has to
                        learn the mask from its input, and loses its episode on an illegal action.
    tfrl/MultiKnob-v0   MultiDiscrete(nvec) actions (nvec=(3, 4, 5)); Box(0, 1, (sum(nvec),)) observation: the
                        target setting of each knob, one-hot per knob, concatenated. Reward: the fraction of knobs
                        set to their target; new targets every step; truncated after 20 steps. Optimal return: 20.
    tfrl/Switches-v0    MultiBinary(n) actions (n=6); Box(0, 1, (n,)) observation: the target pattern. Reward: the
                        fraction of switches matching the pattern; a new pattern every step; truncated after 20
                        steps. Optimal return: 20.
    tfrl/PickAndAim-v0  Hybrid actions: Dict({"tool": Discrete(K), "aim": Box(-1, 1, (1,))}) (K=3). Box(-1, 1,
                        (2K,)) observation: which tool is right, one-hot, then each tool's target (uniform in
                        [-0.8, 0.8]). Reward: 1 - |aim - the right tool's target| (at least 0) with the right tool,
                        0 with another, so the best aim depends on the choice and the observation; new ones every
                        step; truncated after 10 steps. Optimal return: 10.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np

GOAL_GRID_STEP_REWARD = -0.05
GOAL_GRID_GOAL_REWARD = 1.0
_GRID_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))  # up, down, left, right as (row, column) changes


def _discrete_action(action, n: int) -> int | None:
    """`action` as an int if Discrete(n) contains it, else None: the check of Discrete.contains, a few times
    faster (it is on every step)."""
    if isinstance(action, (int, np.integer)) or (
            isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu"):
        index = int(action)
        if 0 <= index < n:
            return index
    return None


def goal_grid_optimal_return(position, goal, size: int = 5) -> float:
    """The best return of a GoalGrid episode from the agent's (row, column) `position` to the goal's (row, column):
    one step per unit of Manhattan distance, all but the last costing 0.05 (the time limit, 4 * size steps, is
    longer than any distance)."""
    distance = abs(int(position[0]) - int(goal[0])) + abs(int(position[1]) - int(goal[1]))
    if distance == 0 or distance > 2 * (size - 1):
        raise ValueError(f"GoalGrid's start and goal are distinct cells of a {size}x{size} grid, got {position}, "
                         f"{goal}")
    return GOAL_GRID_GOAL_REWARD + GOAL_GRID_STEP_REWARD * (distance - 1)


def goal_grid_mean_optimal_return(size: int = 5) -> float:
    """The optimal return averaged over GoalGrid's starts (distinct cells, uniform): the mean Manhattan distance
    between two independent uniform cells is 2 (N^2 - 1) / (3N); equal cells (probability 1/N^2) add nothing to
    it, so between distinct cells it is 2N/3."""
    return GOAL_GRID_GOAL_REWARD + GOAL_GRID_STEP_REWARD * (2 * size / 3 - 1)


class GoalGrid(gym.Env):
    """Walk to the goal on an N x N grid; see the module docstring."""

    def __init__(self, size: int = 5):
        if size < 2:
            raise ValueError(f"GoalGrid needs size >= 2, got {size}")
        self.size, self.max_steps = size, 4 * size
        self.observation_space = gym.spaces.Dict({
            "position": gym.spaces.Box(0, 1, (2,), np.float32),
            "goal": gym.spaces.Discrete(size * size),
            "steps_left": gym.spaces.Box(0, 1, (1,), np.float32)})
        self.action_space = gym.spaces.Discrete(4)
        self._agent = self._goal = (0, 0)
        self._steps = 0

    def _obs(self) -> dict:
        scale = 1.0 / (self.size - 1)
        return {"position": np.array([self._agent[0] * scale, self._agent[1] * scale], np.float32),
                "goal": np.int64(self._goal[0] * self.size + self._goal[1]),
                "steps_left": np.array([(self.max_steps - self._steps) / self.max_steps], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        cells = self.size * self.size
        goal = int(self.np_random.integers(cells))
        agent = int(self.np_random.integers(cells - 1))
        agent += agent >= goal  # uniform over the cells other than the goal's
        self._goal, self._agent = divmod(goal, self.size), divmod(agent, self.size)
        self._steps = 0
        return self._obs(), {"optimal_return": goal_grid_optimal_return(self._agent, self._goal, self.size)}

    def step(self, action):
        move = _discrete_action(action, 4)
        if move is None:
            raise ValueError(f"GoalGrid takes actions 0 (up), 1 (down), 2 (left), 3 (right); got {action!r}")
        d_row, d_column = _GRID_MOVES[move]
        last = self.size - 1
        self._agent = (min(max(self._agent[0] + d_row, 0), last), min(max(self._agent[1] + d_column, 0), last))
        self._steps += 1
        terminated = self._agent == self._goal
        reward = GOAL_GRID_GOAL_REWARD if terminated else GOAL_GRID_STEP_REWARD
        return self._obs(), reward, terminated, not terminated and self._steps >= self.max_steps, {}


def goal_point_optimal_return(position, goal, max_step: float = 0.1, horizon: int = 50) -> float:
    """The best return of a GoalPoint episode from `position` to `goal` (2-vectors): after t steps the point is at
    best max(0, d - max_step t) from the goal, and going straight at full speed is there at every t at once."""
    distance = math.hypot(float(goal[0]) - float(position[0]), float(goal[1]) - float(position[1]))
    steps = np.arange(1, horizon + 1)
    return -float(np.maximum(distance - max_step * steps, 0.0).sum())


class GoalPoint(gym.Env):
    """Move a point to a goal in the square [-1, 1]^2; see the module docstring."""

    def __init__(self, max_step: float = 0.1, horizon: int = 50):
        if not max_step > 0 or horizon < 1:
            raise ValueError(f"GoalPoint needs max_step > 0 and horizon >= 1, got {max_step}, {horizon}")
        self.max_step, self.horizon = float(max_step), horizon
        square = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.observation_space = gym.spaces.Dict({"position": square, "goal": square})
        self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self._position = np.zeros(2, np.float32)
        self._goal = np.zeros(2, np.float32)
        self._steps = 0

    def _obs(self) -> dict:
        return {"position": self._position.copy(), "goal": self._goal.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        # Drawn in float32, the observation's type: the state is exactly what the agent sees.
        self._position, self._goal = self.np_random.uniform(-1, 1, (2, 2)).astype(np.float32)
        self._steps = 0
        optimal = goal_point_optimal_return(self._position, self._goal, self.max_step, self.horizon)
        return self._obs(), {"optimal_return": optimal}

    def step(self, action):
        if np.shape(action) != (2,):
            raise ValueError(f"GoalPoint takes 2 finite numbers as an action, got {action!r}")
        dx, dy = float(action[0]), float(action[1])
        if not (math.isfinite(dx) and math.isfinite(dy)):
            raise ValueError(f"GoalPoint takes 2 finite numbers as an action, got {action!r}")
        scale = self.max_step / max(1.0, math.hypot(dx, dy))
        x = min(max(float(self._position[0]) + scale * dx, -1.0), 1.0)
        y = min(max(float(self._position[1]) + scale * dy, -1.0), 1.0)
        self._position = np.array([x, y], np.float32)
        self._steps += 1
        distance = math.hypot(float(self._goal[0] - self._position[0]), float(self._goal[1] - self._position[1]))
        return self._obs(), -distance, False, self._steps >= self.horizon, {}


class _MaskedSteps(gym.Env):
    """What MaskedPick and RecallPick share: the legal actions of step t are self._masks[t] (int8, 1 = legal),
    self.num_actions the actions, self.illegal "penalty" or "raise"."""

    ILLEGAL_REWARD = -1.0

    def action_masks(self) -> np.ndarray:
        """The legal actions now (True = legal): the observation's "action_mask", as bools."""
        return self._masks[self._steps].astype(bool)

    def _checked(self, action) -> int | None:
        """`action` as an int; None for an illegal one under illegal="penalty" (the step then ends the episode at
        ILLEGAL_REWARD); ValueError for one outside the action space, or an illegal one under illegal="raise"."""
        name, action_given, action = type(self).__name__, action, _discrete_action(action, self.num_actions)
        if action is None:
            raise ValueError(f"{name} takes actions 0 to {self.num_actions - 1}, got {action_given!r}")
        if self._masks[self._steps, action]:
            return action
        if self.illegal == "raise":
            raise ValueError(f"{name}: action {action} is illegal at step {self._steps} (legal: "
                             f"{np.flatnonzero(self._masks[self._steps]).tolist()})")
        return None


class MaskedPick(_MaskedSteps):
    """Pick the paying action among the few legal ones; see the module docstring."""

    def __init__(self, num_actions: int = 10, max_legal: int = 3, horizon: int = 20, illegal: str = "penalty",
                 mask_key: str = "action_mask"):
        if not 1 <= max_legal <= num_actions or horizon < 1:
            raise ValueError(f"MaskedPick needs 1 <= max_legal <= num_actions and horizon >= 1, got max_legal="
                             f"{max_legal}, num_actions={num_actions}, horizon={horizon}")
        if illegal not in ("penalty", "raise"):
            raise ValueError(f"MaskedPick's illegal is 'penalty' or 'raise', got {illegal!r}")
        if mask_key in ("", "state"):
            raise ValueError(f"MaskedPick's mask_key must name a key other than 'state', got {mask_key!r}")
        self.num_actions, self.max_legal, self.horizon, self.illegal = num_actions, max_legal, horizon, illegal
        self.mask_key = mask_key
        if mask_key != "action_mask":
            # The mask is then an ordinary input and the env no mask source: an agent learns the rules (as
            # "without masks" in docs/benchmarks.md) instead of having them applied.
            self.action_masks = None
        self.observation_space = gym.spaces.Dict({
            "state": gym.spaces.Box(0, 1, (num_actions,), np.float32),  # the payoffs
            mask_key: gym.spaces.Box(0, 1, (num_actions,), np.int8)})
        self.action_space = gym.spaces.Discrete(num_actions)
        self._masks = np.ones((1, num_actions), np.int8)
        self._paying = np.zeros(1, np.int64)
        self._states = np.zeros((1, num_actions), np.float32)
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        # The whole episode drawn at once (horizon + 1 observations): a few generator calls, none per step.
        rows, k = self.horizon + 1, self.num_actions
        # Per row, a random permutation of the actions: its first legal_counts are legal, its first pays.
        order = self.np_random.random((rows, k)).argsort(axis=1)
        legal_counts = self.np_random.integers(1, self.max_legal + 1, rows)
        self._masks = np.zeros((rows, k), np.int8)
        firsts = order[:, :self.max_legal]
        self._masks[np.arange(rows)[:, None], firsts] = np.arange(self.max_legal) < legal_counts[:, None]
        self._paying = order[:, 0]
        decoys = (self.np_random.random((rows, k)) < 0.5) & (self._masks == 0)
        self._states = decoys.astype(np.float32)
        self._states[np.arange(rows), self._paying] = 1.0
        self._steps = 0
        return self._obs(), {"optimal_return": float(self.horizon)}

    def _obs(self) -> dict:
        return {"state": self._states[self._steps].copy(), self.mask_key: self._masks[self._steps].copy()}

    def step(self, action):
        action = self._checked(action)
        if action is None:
            return self._obs(), self.ILLEGAL_REWARD, True, False, {"illegal_action": True}
        reward = 1.0 if action == self._paying[self._steps] else 0.0
        self._steps += 1
        return self._obs(), reward, False, self._steps >= self.horizon, {}


class RecallPick(_MaskedSteps):
    """Pick the cue seen on the first step whenever it is legal; see the module docstring."""
    NUM_LEGAL = 2  # on each recall step

    def __init__(self, num_actions: int = 4, horizon: int = 8, illegal: str = "penalty"):
        if num_actions < self.NUM_LEGAL or horizon < 2:
            raise ValueError(f"RecallPick needs num_actions >= {self.NUM_LEGAL} and horizon >= 2, got "
                             f"num_actions={num_actions}, horizon={horizon}")
        if illegal not in ("penalty", "raise"):
            raise ValueError(f"RecallPick's illegal is 'penalty' or 'raise', got {illegal!r}")
        self.num_actions, self.horizon, self.illegal = num_actions, horizon, illegal
        self.observation_space = gym.spaces.Dict({
            "cue": gym.spaces.Box(0, 1, (num_actions,), np.float32),
            "action_mask": gym.spaces.Box(0, 1, (num_actions,), np.int8)})
        self.action_space = gym.spaces.Discrete(num_actions)
        self._masks = np.ones((horizon + 1, num_actions), np.int8)
        self._cue, self._steps = 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        k, rows = self.num_actions, self.horizon + 1
        self._cue = int(self.np_random.integers(k))
        order = self.np_random.random((rows, k)).argsort(axis=1)  # per row, its first NUM_LEGAL are legal
        self._masks = np.zeros((rows, k), np.int8)
        self._masks[np.arange(rows)[:, None], order[:, :self.NUM_LEGAL]] = 1
        self._masks[0] = 1  # the cue's step: anything goes
        optimal = float(self._masks[1:self.horizon, self._cue].sum())
        self._steps = 0
        return self._obs(), {"optimal_return": optimal}

    def _obs(self) -> dict:
        cue = np.zeros(self.num_actions, np.float32)
        if self._steps == 0:
            cue[self._cue] = 1.0
        return {"cue": cue, "action_mask": self._masks[self._steps].copy()}

    def step(self, action):
        action = self._checked(action)
        if action is None:
            return self._obs(), self.ILLEGAL_REWARD, True, False, {"illegal_action": True}
        reward = 1.0 if self._steps > 0 and action == self._cue else 0.0
        self._steps += 1
        return self._obs(), reward, False, self._steps >= self.horizon, {}


class _TargetMatching(gym.Env):
    """A new target each step (drawn per episode at reset), shown in the observation; the reward is the fraction
    of action entries equal to the target's, so the best return is the horizon."""

    def __init__(self, nvec, horizon: int):
        self._nvec = np.asarray(nvec, np.int64).reshape(-1)
        if self._nvec.size == 0 or (self._nvec < 2).any() or horizon < 1:
            raise ValueError(f"{type(self).__name__} needs choices of at least 2 values and horizon >= 1, got "
                             f"{self._nvec.tolist()}, horizon={horizon}")
        self.horizon = horizon
        self._nvec_unsigned = self._nvec.astype(np.uint64)
        self._targets = np.zeros((1, self._nvec.size), np.int64)
        self._observations = np.zeros((1, 1), np.float32)
        self._steps = 0

    def _encoded(self, targets: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        # All horizon + 1 targets at once: uniform in 0..n-1 per entry.
        uniform = self.np_random.random((self.horizon + 1, self._nvec.size))
        self._targets = (uniform * self._nvec).astype(np.int64)
        self._observations = self._encoded(self._targets)
        self._steps = 0
        return self._observations[0].copy(), {"optimal_return": float(self.horizon)}

    def step(self, action):
        action = np.asarray(action)
        if (action.shape != self._nvec.shape or action.dtype.kind not in "iub"
                or not (action.astype(np.uint64) < self._nvec_unsigned).all()):  # negatives wrap to huge
            raise ValueError(f"{type(self).__name__} takes {self.action_space}, got {action!r}")
        reward = np.count_nonzero(action == self._targets[self._steps]) / self._nvec.size
        self._steps += 1
        return self._observations[self._steps].copy(), reward, False, self._steps >= self.horizon, {}


class MultiKnob(_TargetMatching):
    """Set each knob to its target, shown one-hot; see the module docstring."""

    def __init__(self, nvec=(3, 4, 5), horizon: int = 20):
        super().__init__(nvec, horizon)
        self.action_space = gym.spaces.MultiDiscrete(self._nvec)
        self.observation_space = gym.spaces.Box(0, 1, (int(self._nvec.sum()),), np.float32)
        self._offsets = np.concatenate([[0], np.cumsum(self._nvec)[:-1]])

    def _encoded(self, targets: np.ndarray) -> np.ndarray:
        one_hots = np.zeros((len(targets), int(self._nvec.sum())), np.float32)
        np.put_along_axis(one_hots, targets + self._offsets, 1.0, axis=1)
        return one_hots


class Switches(_TargetMatching):
    """Set the switches to the target pattern; see the module docstring."""

    def __init__(self, n: int = 6, horizon: int = 20):
        super().__init__([2] * n, horizon)
        self.action_space = gym.spaces.MultiBinary(n)
        self.observation_space = gym.spaces.Box(0, 1, (n,), np.float32)

    def _encoded(self, targets: np.ndarray) -> np.ndarray:
        return targets.astype(np.float32)


class PickAndAim(gym.Env):
    """Pick the right tool and aim it at its target; see the module docstring."""

    TARGET_RANGE = 0.8

    def __init__(self, num_tools: int = 3, horizon: int = 10):
        if num_tools < 2 or horizon < 1:
            raise ValueError(f"PickAndAim needs num_tools >= 2 and horizon >= 1, got {num_tools}, {horizon}")
        self.num_tools, self.horizon = num_tools, horizon
        self.action_space = gym.spaces.Dict({"tool": gym.spaces.Discrete(num_tools),
                                             "aim": gym.spaces.Box(-1.0, 1.0, (1,), np.float32)})
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2 * num_tools,), np.float32)
        self._right = np.zeros(1, np.int64)
        self._targets = np.zeros((1, num_tools), np.float32)
        self._steps = 0

    def _obs(self) -> np.ndarray:
        cue = np.zeros(self.num_tools, np.float32)
        cue[self._right[self._steps]] = 1.0
        return np.concatenate([cue, self._targets[self._steps]])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._right = self.np_random.integers(0, self.num_tools, self.horizon + 1)
        self._targets = self.np_random.uniform(-self.TARGET_RANGE, self.TARGET_RANGE,
                                               (self.horizon + 1, self.num_tools)).astype(np.float32)
        self._steps = 0
        return self._obs(), {"optimal_return": float(self.horizon)}

    def step(self, action):
        tool, aim = self._checked(action)
        right = int(self._right[self._steps])
        reward = max(0.0, 1.0 - abs(aim - float(self._targets[self._steps, right]))) if tool == right else 0.0
        self._steps += 1
        return self._obs(), reward, False, self._steps >= self.horizon, {}

    def _checked(self, action) -> tuple[int, float]:
        """(tool, aim) of a {"tool", "aim"} action; ValueError for anything the action space does not hold."""
        if not isinstance(action, dict) or set(action) != {"tool", "aim"}:
            raise ValueError(f"PickAndAim takes {self.action_space}, got {action!r}")
        tool = _discrete_action(action["tool"], self.num_tools)
        aim = np.asarray(action["aim"])
        if tool is None or aim.shape != (1,) or aim.dtype.kind != "f" or not (np.abs(aim) <= 1.0).all():
            raise ValueError(f"PickAndAim takes {self.action_space}, got {action!r}")
        return tool, float(aim[0])


_ENTRY_POINTS = {"tfrl/GoalGrid-v0": GoalGrid, "tfrl/GoalPoint-v0": GoalPoint, "tfrl/MaskedPick-v0": MaskedPick,
                 "tfrl/MultiKnob-v0": MultiKnob, "tfrl/Switches-v0": Switches, "tfrl/RecallPick-v0": RecallPick,
                 "tfrl/PickAndAim-v0": PickAndAim}


def register() -> None:
    """Registers the example envs' ids in gymnasium (again: nothing)."""
    for env_id, entry_point in _ENTRY_POINTS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=entry_point)
