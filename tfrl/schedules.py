"""Values that change over training, one type for all of them: learning rates, PPO's clip range, DQN's epsilon and
prioritized replay's importance-sampling exponent; and the step deadlines of the training loops (next_deadline).

    Schedule(start, end, length).at(position) = start + min(position / length, 1) * (end - start)

with `position` in whatever the schedule counts (env steps for the on-policy learning rate, epsilon and beta;
gradient steps for DQN's learning rate, which runs inside the train step as a Keras schedule of the optimizer's
own counter: `keras_schedule()`). A constant is Schedule(value) (end = start). The on-policy agents choose theirs
by name (`lr_schedule`, `clip_range_schedule`: SCHEDULES): "linear" falls to 0 over total_env_steps, like SB3's
linear schedules (which read the progress after the rollout rather than before it: a difference of one rollout).
"""

from __future__ import annotations

import dataclasses

from tfrl.lazy_import import LazyModule

keras = LazyModule("keras")

SCHEDULES = ("constant", "linear")


@dataclasses.dataclass(frozen=True)
class Schedule:
    start: float
    end: float | None = None  # None: constant
    length: float = 1.0  # positions over which the value goes from start to end; <= 0: end from the start

    @classmethod
    def named(cls, name: str, value: float, length: float) -> Schedule:
        """An on-policy schedule by name (SCHEDULES): "constant" keeps value, "linear" falls to 0 over length."""
        return cls(value) if name == "constant" else cls(value, 0.0, length)

    @property
    def constant(self) -> bool:
        return self.end is None or self.end == self.start

    def at(self, position: float) -> float:
        if self.end is None:
            return self.start
        if self.length <= 0:
            return self.end
        progress = min(position / self.length, 1.0)
        return self.start + progress * (self.end - self.start)

    def keras_schedule(self):
        """The schedule over an optimizer's iterations (for a learning rate inside a tf.function): a float when
        constant, else Keras' PolynomialDecay of power 1 (the same line)."""
        if self.constant:
            return self.start
        return keras.optimizers.schedules.PolynomialDecay(self.start, decay_steps=max(1, int(self.length)),
                                                         end_learning_rate=self.end)


def next_deadline(deadline: int, now: int, period: int) -> int:
    """The first deadline + m * period (m >= 1) after `now`; for a deadline that has passed.

    Env steps advance by num_envs at a time, so `now` may have overshot `deadline`.
    """
    return deadline + period * ((now - deadline) // period + 1)
