"""The best evaluated policy of a run (`keep_best_policy`): kept beside the checkpoints, evaluated and exported.

Some runs learn a good policy and lose it before training ends (A2C on
LunarLander: docs/benchmarks.md). With `keep_best_policy`, every periodic
evaluation whose mean return beats all earlier ones of the run saves the policy
network (no optimizer) to <run_dir>/best_policy/, one checkpoint kept, in
tfrl.run.checkpoints' crash-safe format with the evaluation in its loop state. A
resumed run continues from the best saved there, even one saved after the
checkpoint it resumes from (a crash between the two): that is still a policy
this run trained and evaluated. A run that starts over (no checkpoint to resume
from) deletes it. Only evaluated policies are candidates: when total_env_steps is
not a multiple of eval_interval, the last policy is not one.

At the end the loop evaluates the last policy as always ("final_eval"), then the
best one on the same episodes ("best_eval"; through the TF model, as exported,
where final_eval plays the loop's NumPy mirror); train.py exports the best one. The
periodic evaluations run on other episodes (evaluation.PERIODIC_SEED_OFFSET) than
the final ones (FINAL_SEED_OFFSET), so the best policy's final number is a fresh
estimate, not the maximum the selection picked.
"""

from __future__ import annotations

import math
import pathlib
import shutil
from typing import Any, Callable, Mapping

from absl import logging

from tfrl.hardware import distribute
from tfrl.hardware.runtime import Runtime
from tfrl.models import serving
from tfrl.models.export import ServingPolicy
from tfrl.run import BEST_POLICY_DIR, checkpoints, evaluation
from tfrl.run.metrics import MetricsLogger



def check_runtime(keep_best_policy: bool, runtime: Runtime) -> None:
    """DistributeConfigError for keep_best_policy with several workers: each evaluates on its own seeds, so they
    would disagree on which policy is best (and only the chief's run dir is kept)."""
    if keep_best_policy and runtime.cluster.num_workers > 1:
        raise distribute.DistributeConfigError(
            "keep_best_policy is not supported with several workers (--strategy=multi_worker)")


class BestPolicy:
    """Saves `policy_items` (the serving policy's checkpoint items, e.g. {"network": model}) when an evaluation
    beats the best so far."""

    def __init__(self, run_dir: pathlib.Path, policy_items: Mapping[str, Any], start_over: bool):
        """start_over: the run found no checkpoint to resume from, so a best policy on disk is from an abandoned
        attempt and is deleted."""
        directory = pathlib.Path(run_dir) / BEST_POLICY_DIR
        if start_over and directory.exists():
            logging.warning("starting over: deleting the best policy of the earlier attempt in %s", directory)
            shutil.rmtree(directory)
        self._checkpointer = checkpoints.Checkpointer(run_dir, policy_items, keep=1, subdir=BEST_POLICY_DIR)
        saved = self._checkpointer.newest_loop_state()
        self.env_step: int | None = saved[0] if saved else None  # env step of the best policy so far
        self.return_mean: float = -math.inf  # its periodic evaluation's mean return
        if saved:
            value = saved[1].get("eval_return_mean")
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.return_mean = float(value)
            else:  # only a hand-edited file: any evaluation replaces it
                logging.warning("the best policy in %s has no valid evaluation return (%r); the next evaluation "
                                "replaces it", directory, value)

    def offer(self, env_step: int, return_mean: float) -> bool:
        """Saves the current policy if `return_mean` (its periodic evaluation) beats the best so far; True if saved.

        Ties keep the earlier policy. A NaN return is never the best.
        """
        if not return_mean > self.return_mean:
            return False
        self._checkpointer.save(env_step, {"eval_return_mean": float(return_mean)})
        self.env_step, self.return_mean = env_step, float(return_mean)
        logging.info("best policy so far: env step %d, evaluation return %.2f", env_step, return_mean)
        return True


def restore(run_dir: pathlib.Path, policy_items: Mapping[str, Any]) -> checkpoints.Restored | None:
    """Loads the run's best policy into `policy_items`; None if the run has none.

    Raises checkpoints.CheckpointError if it exists but cannot be loaded.
    """
    return checkpoints.Checkpointer(run_dir, policy_items, keep=1, subdir=BEST_POLICY_DIR).restore_latest(
        load_arrays=False)


def log_final_evaluation(run_dir: pathlib.Path, policy: ServingPolicy, observations, env, episodes: int,
                         seed: int, logger: MetricsLogger, env_step: int,
                         stop_requested: Callable[[], bool] = lambda: False) -> dict | None:
    """Evaluates the run's best policy on the final evaluation's episodes and logs a "best_eval" record.

    `policy` is a fresh serving policy of the agent (restored here). Returns the record, or None if the run
    has no best policy or it cannot be loaded (a warning; the last policy is then the run's result).
    """
    try:
        restored = restore(run_dir, policy.checkpoint_items)
    except checkpoints.CheckpointError as e:
        logging.warning("the best policy cannot be loaded, the last one stands: %s", e)
        return None
    if restored is None:
        return None
    returns = evaluation.evaluate(serving.traced_policy(policy, observations), env, episodes, seed=seed,
                                  stop_requested=stop_requested)
    return logger.log("best_eval", env_step, {
        "return_mean": float(returns.mean()), "return_std": float(returns.std()), "episodes": len(returns),
        "best_env_step": restored.env_step, "best_eval_return_mean": restored.loop_state.get("eval_return_mean")})
