"""Step deadlines of the training loops (train, target update, log, eval, checkpoint)."""


def next_deadline(deadline: int, now: int, period: int) -> int:
    """The first deadline + m * period (m >= 1) after `now`; for a deadline that has passed.

    Env steps advance by num_envs at a time, so `now` may have overshot `deadline`.
    """
    return deadline + period * ((now - deadline) // period + 1)
