"""Envs with structure for the tests of Dict observations, action masks and their faults (registered when imported:
--env=structure_envs:<Id>, with tests/ on the Python path)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from tfrl.envs import image_envs


class Everything(gym.Env):
    """One step of every observation entry kind tfrl converts: nested Dict, Tuple, Discrete, MultiDiscrete,
    MultiBinary, float64, int and bool Boxes, a uint8 image and a bool image."""

    observation_space = gym.spaces.Dict({
        "arm": gym.spaces.Dict({"joints": gym.spaces.Box(-1, 1, (3,), np.float64), "grip": gym.spaces.Discrete(3)}),
        "pair": gym.spaces.Tuple((gym.spaces.MultiDiscrete([2, 3]), gym.spaces.MultiBinary(2))),
        "count": gym.spaces.Box(0, 10, (1,), np.int64),
        "camera": gym.spaces.Box(0, 255, (6, 5, 3), np.uint8),
        "grid": gym.spaces.Box(0, 1, (4, 4, 1), np.bool_),
    })
    action_space = gym.spaces.Discrete(2)

    def _obs(self):
        return {"arm": {"joints": np.array([0.5, -0.25, 1.0]), "grip": 2},
                "pair": (np.array([1, 2]), np.array([1, 0], np.int8)), "count": np.array([7]),
                "camera": np.full((6, 5, 3), 9, np.uint8), "grid": np.eye(4, dtype=bool)[:, :, None]}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, True, False, {}


class DictPendulum(gym.Wrapper):
    """Pendulum with its observation split into {"angle": cos and sin, "speed": the angular velocity}."""

    def __init__(self):
        super().__init__(gym.make("Pendulum-v1"))
        self.observation_space = gym.spaces.Dict({"angle": gym.spaces.Box(-1, 1, (2,), np.float32),
                                                  "speed": gym.spaces.Box(-8, 8, (1,), np.float32)})

    def _split(self, obs):
        return {"angle": obs[:2].astype(np.float32), "speed": obs[2:].astype(np.float32)}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._split(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._split(obs), reward, terminated, truncated, info


class CatchWithClock(gym.Wrapper):
    """tfrl/Catch-v0 with its board as an image field beside a vector field: {"board": uint8 HWC, "clock"}."""

    def __init__(self):
        super().__init__(image_envs.Catch())
        self.observation_space = gym.spaces.Dict({"board": self.env.observation_space,
                                                  "clock": gym.spaces.Box(0, 1, (1,), np.float32)})
        self._t = 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._t = 0
        return {"board": obs, "clock": np.zeros(1, np.float32)}, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        return {"board": obs, "clock": np.full(1, self._t / 10, np.float32)}, reward, terminated, truncated, info


class MethodMaskedCorridor(gym.Env):
    """A corridor of 6 cells, Discrete(3) actions (0 left, 1 right, 2 stay) and a Box observation (one-hot), whose
    legal actions come from an action_masks() method (sb3-contrib's convention): never left at the wall, never
    stay. Reward +1 at the goal (the end), -0.05 per other step; 20 steps at most. integer_obs: the observation is
    the cell's number, Discrete(6)."""

    observation_space = gym.spaces.Box(0, 1, (6,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, no_legal_at: int = 0, bad_mask_at: int = 0, bad_mask: str = "short", integer_obs: bool = False):
        self._position = self._steps = 0
        self._integer_obs = integer_obs
        if integer_obs:
            self.observation_space = gym.spaces.Discrete(6)
        self._no_legal_at = no_legal_at  # a step from which no action is legal (0: never)
        self._bad_mask_at, self._bad_mask = bad_mask_at, bad_mask  # a step from which the mask is malformed

    def action_masks(self) -> np.ndarray:
        if self._no_legal_at and self._steps >= self._no_legal_at:
            return np.zeros(3, bool)
        if self._bad_mask_at and self._steps >= self._bad_mask_at:
            return {"short": np.ones(2, bool), "probabilities": np.float32([0.5, 1, 0])}[self._bad_mask]
        return np.array([self._position > 0, True, False])

    def _obs(self):
        return self._position if self._integer_obs else np.eye(6, dtype=np.float32)[self._position]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._position = self._steps = 0
        return self._obs(), {}

    def step(self, action):
        if not self.action_masks()[int(action)]:
            raise ValueError(f"illegal action {action} at position {self._position}")
        self._position = max(0, self._position + (1 if int(action) == 1 else -1))
        self._steps += 1
        done = self._position == 5
        return self._obs(), 1.0 if done else -0.05, done, self._steps >= 20 and not done, {}


class ChangingKeys(gym.Env):
    """A Dict observation whose keys (or with change="shape", whose entry's shape) change at the 5th step (an env
    bug tfrl reports, naming the env step)."""

    observation_space = gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,), np.float32)})
    action_space = gym.spaces.Discrete(2)

    def __init__(self, change: str = "key"):
        self._changed = {"key": {"b": np.zeros(2, np.float32)}, "shape": {"a": np.zeros(3, np.float32)}}[change]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return {"a": np.zeros(2, np.float32)}, {}

    def step(self, action):
        self._steps += 1
        obs = {"a": np.zeros(2, np.float32)} if self._steps < 5 else self._changed
        return obs, 0.0, False, False, {}


class MaskedHybrid(gym.Env):
    """Tuple actions (Discrete(4) and a Box(-1, 1, (2,)) aim) with an action mask over the Discrete part: each
    step 1 or 2 random values are legal; reward 1 for a legal pick minus |aim - target| / 2 where target is the
    observation's "target" (the mask's values have no entries for the Box part); an illegal pick raises. 8 steps."""

    observation_space = gym.spaces.Dict({"target": gym.spaces.Box(-0.5, 0.5, (2,)),
                                         "action_mask": gym.spaces.Box(0, 1, (4,), np.int8)})
    action_space = gym.spaces.Tuple((gym.spaces.Discrete(4), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)))

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, mask_size: int = 4, render_mode: str | None = None):
        self.render_mode = render_mode
        self._mask_size = mask_size  # another size: a mask that does not fit the discrete part
        self.observation_space = gym.spaces.Dict({"target": gym.spaces.Box(-0.5, 0.5, (2,)),
                                                  "action_mask": gym.spaces.Box(0, 1, (mask_size,), np.int8)})
        self._mask, self._target, self._steps = np.ones(mask_size, np.int8), np.zeros(2, np.float32), 0

    def _obs(self):
        self._mask = np.zeros(self._mask_size, np.int8)
        self._mask[self.np_random.choice(4, size=int(self.np_random.integers(1, 3)), replace=False)] = 1
        self._target = self.np_random.uniform(-0.5, 0.5, 2).astype(np.float32)
        return {"target": self._target.copy(), "action_mask": self._mask.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return self._obs(), {}

    def step(self, action):
        pick, aim = action
        if not self._mask[int(pick)]:
            raise ValueError(f"MaskedHybrid: illegal pick {pick} under the mask {self._mask.tolist()}")
        reward = 1.0 - float(np.abs(np.asarray(aim) - self._target).sum()) / 2
        self._steps += 1
        return self._obs(), reward, False, self._steps >= 8, {}

    def render(self):
        return np.full((4, 4, 3), 10 * self._steps, np.uint8)


class ToolOnly(gym.Env):
    """tfrl/PickAndAim-v0's observations with a Dict action of its "tool" part only (no "aim"): one step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
    action_space = gym.spaces.Dict({"tool": gym.spaces.Discrete(3)})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(6, np.float32), {}

    def step(self, action):
        return np.zeros(6, np.float32), 0.0, True, False, {}


gym.register(id="MaskedHybrid-v0", entry_point=MaskedHybrid)
gym.register(id="ToolOnly-v0", entry_point=ToolOnly)
gym.register(id="Everything-v0", entry_point=Everything)
gym.register(id="DictPendulum-v0", entry_point=DictPendulum)
gym.register(id="CatchWithClock-v0", entry_point=CatchWithClock)
gym.register(id="MethodMaskedCorridor-v0", entry_point=MethodMaskedCorridor)
gym.register(id="ChangingKeys-v0", entry_point=ChangingKeys)
