"""The standard Atari preprocessing (Mnih et al. 2015; Machado et al. 2018), from gymnasium's own wrappers.

For `ALE/...-v5` and `...NoFrameskip-v4` ids, from the emulator outwards:

    AtariPreprocessing       up to 30 no-op actions at reset, 4 frames per action (max-pooled over the last two),
                             84x84 grayscale uint8
    RecordEpisodeStatistics  the game's own score and length: what logs, evaluations and videos report
    EpisodicLife             training only: losing a life ends the episode for the learner (no bootstrap), the
                             game itself goes on (as SB3's EpisodicLifeEnv)
    ClipReward               training only: rewards clipped to [-1, 1] (Atari rewards are integers: their sign)
    FrameStackObservation    the last 4 frames (the first frame of an episode repeated before it)
    channels last            [84, 84, 4] uint8: an HWC image for the CNN torsos

v5 ids keep their sticky actions (repeat_action_probability=0.25); the v4 NoFrameskip ids have none.
Each part can be switched through the env kwargs (`--env_kwargs=clip_rewards=false`), with these names and
defaults; the other kwargs go to gymnasium.make:
"""

from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np

FRAME_STACK = 4
OPTIONS = {"noop_max": 30, "frame_skip": 4, "screen_size": 84, "terminal_on_life_loss": True,
           "clip_rewards": True, "frame_stack": FRAME_STACK}
__doc__ += "".join(f"    {name}={value}\n" for name, value in OPTIONS.items())


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/") or env_id.endswith("NoFrameskip-v4")


def options(kwargs: Mapping[str, Any]) -> tuple[dict, dict]:
    """(tfrl's preprocessing options, the rest of the kwargs for gymnasium.make)."""
    chosen = {name: kwargs.get(name, default) for name, default in OPTIONS.items()}
    return chosen, {name: value for name, value in kwargs.items() if name not in OPTIONS}


def frame_stack(kwargs: Mapping[str, Any]) -> int:
    return int(options(kwargs)[0]["frame_stack"])


class EpisodicLife(gym.Wrapper):
    """terminated=True when a life is lost; reset() then continues the same game with a no-op, and resets the
    emulator only once the game is over. The learner sees each life as an episode; the game's score is whole."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        life_lost = 0 < lives < self._lives
        self._lives = lives
        return obs, reward, terminated or life_lost, truncated, info

    def reset(self, **kwargs):
        if self._game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the no-op ended the game
                obs, info = self.env.reset(**kwargs)
        self._game_over = False
        self._lives = self.env.unwrapped.ale.lives()
        return obs, info


def make(env_id: str, training: bool, make_options: Mapping[str, Any], kwargs: Mapping[str, Any]) -> gym.Env:
    """The preprocessed env of an Atari id; `training` adds the training-only wrappers."""
    chosen, make_kwargs = options(kwargs)
    env = gym.make(env_id, frameskip=1, disable_env_checker=True, **make_options, **make_kwargs)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=chosen["noop_max"], frame_skip=chosen["frame_skip"],
                                          screen_size=chosen["screen_size"], grayscale_obs=True)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    if training and chosen["terminal_on_life_loss"]:
        env = EpisodicLife(env)
    if training and chosen["clip_rewards"]:
        env = gym.wrappers.ClipReward(env, -1.0, 1.0)
    env = gym.wrappers.FrameStackObservation(env, chosen["frame_stack"])
    size = chosen["screen_size"]
    hwc = gym.spaces.Box(0, 255, (size, size, chosen["frame_stack"]), np.uint8)
    return gym.wrappers.TransformObservation(env, lambda obs: np.moveaxis(np.asarray(obs), 0, -1), hwc)
