"""Replay for frame-stacked image observations (Atari): each frame stored once, the stacks rebuilt at sampling.

An observation of k stacked frames [H, W, k] shares k - 1 frames with the one before it, and a transition holds
two observations: stored whole, a transition costs 2k frames; here it costs about one (SB3's
optimize_memory_usage and Dopamine do the same). A 1M-transition buffer of 84x84 frames is about 7.2 GB
instead of 56 GB.

    FrameStore   a ring of frames [F, H, W] uint8; frame r (a "ref", counting every frame ever added) knows its
                 predecessor in its episode (-1 at the episode's first frame). The stack ending at r is r and its
                 k - 1 predecessors, the episode's first frame repeated where there are fewer (as gymnasium's
                 FrameStackObservation pads at reset). A frame is gone once F newer ones were added.
    FrameStackReplay   a UniformReplay (or PrioritizedReplay) of transitions whose observations are refs, and the
                 FrameStore. Each vector step adds the newest frame of every env's next observation, and at an
                 episode's end also the newest frame of the next episode's first observation; transitions are
                 n-step ones as usual (tfrl.replay), built from refs.

The store keeps F = capacity + capacity / 50 + a few frames per env, so that a transition's frames outlive it
but for episode starts (one extra frame each): the oldest transitions can lose a frame first, and a batch row
that would need a lost frame is drawn again.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tfrl.envs import VectorStep


class FrameStore:
    def __init__(self, capacity: int, frame_shape: Sequence[int], stack: int):
        self.capacity, self.stack = capacity, stack
        self.frames = np.zeros((capacity, *frame_shape), np.uint8)
        self.prev = np.full(capacity, -1, np.int64)  # ref of each slot's predecessor in its episode, -1 if none
        self.written = 0  # refs so far; the next frame is ref `written`, in slot written % capacity

    def add(self, frames: np.ndarray, prev: np.ndarray) -> np.ndarray:
        """frames [N, H, W], their predecessors' refs [N] (-1: an episode's first frame) -> their refs [N]."""
        refs = self.written + np.arange(len(frames))
        slots = refs % self.capacity
        self.frames[slots] = frames
        self.prev[slots] = prev
        self.written += len(frames)
        return refs

    def stack_refs(self, refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """refs [...] -> (the stacks' refs [..., k], oldest first; whether all of them are still stored [...])."""
        chain = [np.asarray(refs, np.int64)]
        for _ in range(self.stack - 1):
            newer = chain[0]
            prev = self.prev[newer % self.capacity]
            chain.insert(0, np.where(prev >= 0, prev, newer))  # an episode's first frame repeats
        chain = np.stack(chain, axis=-1)
        # Each ref, not only the oldest: an overwritten slot's predecessor is the newer frame's, which may be kept.
        return chain, (chain >= self.written - self.capacity).all(axis=-1)

    def stacks(self, chain: np.ndarray) -> np.ndarray:
        """Stack refs [..., k] -> the observations [..., H, W, k]."""
        return np.moveaxis(self.frames[chain % self.capacity], -3, -1)


class FrameStackReplay:
    """The replay of one run with frame-stacked observations; see the module docstring."""

    def __init__(self, transitions, frame_shape: Sequence[int], stack: int, num_envs: int, n_step: int):
        """transitions: a UniformReplay or PrioritizedReplay with obs_shape () and obs_dtype int64 (refs)."""
        self.transitions = transitions
        margin = transitions.capacity // 50 + num_envs * (stack + n_step + 1)
        self.frames = FrameStore(transitions.capacity + margin, frame_shape, stack)
        self._current = None  # refs of the envs' current observations [N]; None: start from the env's

    @property
    def size(self) -> int:
        return self.transitions.size

    def observe(self, step: VectorStep) -> tuple[np.ndarray, np.ndarray]:
        """Adds one vector step's new frames -> (refs of s_t [N], refs of s_{t+1} [N]), for the n-step builder;
        s_{t+1} is the true last observation where an episode ended."""
        if self._current is None:
            self._current = self.frames.add(step.obs[..., -1], np.full(len(step.obs), -1))
        obs_refs = self._current
        next_refs = self.frames.add(step.final_obs()[..., -1], obs_refs)
        self._current = next_refs.copy()
        done = np.flatnonzero(step.done)
        if len(done):  # the next episodes' first frames
            self._current[done] = self.frames.add(step.next_obs[done][..., -1], np.full(len(done), -1))
        return obs_refs, next_refs

    def add(self, obs_refs, action, reward, discount, next_refs) -> None:
        """The inner replay refuses a non-finite reward (NonFiniteError); frames (uint8) and refs cannot be."""
        self.transitions.add(obs_refs, action, reward, discount, next_refs)

    def sample(self, batch_size: int, num_batches: int, **kwargs) -> dict[str, np.ndarray]:
        """The inner replay's sample with the observations' stacks [K, B, H, W, k] uint8 in place of refs; a row
        that needs a frame no longer stored is drawn again."""
        batch = self.transitions.sample(batch_size, num_batches, **kwargs)
        obs, obs_kept = self.frames.stack_refs(batch["obs"])
        next_obs, next_kept = self.frames.stack_refs(batch["next_obs"])
        lost = ~(obs_kept & next_kept)
        for _ in range(100):
            if not lost.any():
                break
            redraw = self.transitions.sample(int(lost.sum()), 1, **kwargs)
            for name, values in redraw.items():
                batch[name][lost] = values[0]
            obs[lost], kept = self.frames.stack_refs(redraw["obs"][0])
            next_obs[lost], next_kept_again = self.frames.stack_refs(redraw["next_obs"][0])
            lost[lost] = ~(kept & next_kept_again)
        else:
            raise RuntimeError("the frame replay holds too few transitions whose frames are all stored")
        batch["obs"], batch["next_obs"] = self.frames.stacks(obs), self.frames.stacks(next_obs)
        return batch

    def update_priorities(self, index: np.ndarray, errors: np.ndarray) -> None:
        self.transitions.update_priorities(index, errors)

    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict]:
        arrays, state = self.transitions.checkpoint_state()
        stored = min(self.frames.written, self.frames.capacity)
        arrays.update(frames=self.frames.frames[:stored], frame_prev=self.frames.prev[:stored])
        return arrays, {**state, "frames_written": self.frames.written, "frame_capacity": self.frames.capacity}

    def restore_checkpoint_state(self, arrays: dict[str, np.ndarray], state: dict) -> None:
        """Inverse of checkpoint_state; the run goes on from fresh episodes (the envs were reset)."""
        if state["frame_capacity"] != self.frames.capacity:
            raise ValueError(f"frame store capacity {self.frames.capacity} != the checkpoint's "
                             f"{state['frame_capacity']}")
        transitions = {name: value for name, value in arrays.items() if name not in ("frames", "frame_prev")}
        self.transitions.restore_checkpoint_state(transitions, state)
        stored = len(arrays["frames"])
        self.frames.frames[:stored] = arrays["frames"]
        self.frames.prev[:stored] = arrays["frame_prev"]
        self.frames.written = int(state["frames_written"])
        self._current = None
