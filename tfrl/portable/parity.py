"""Does a converted policy answer as its SavedModel does? Observations recorded from the env, compared output by
output.

Observations come from playing the env: the SavedModel's greedy action, or with probability RANDOM_SHARE a random
(legal) one, over several episodes, so that the states are the ones a deployed policy meets, action masks
included, rather than samples of an observation space whose bounds may be infinite.

Per format and quantization (TOLERANCES): discrete actions must agree on at least `agreement` of the
observations (and be legal where a mask says so), and every float output (Q-values, logits, values, means,
continuous actions) must stay within `error` of the SavedModel's, relative to the larger of 1 and that output's
largest magnitude over the batch.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from tfrl import envs, observations, serving

RANDOM_SHARE = 0.25
# (format, quantization) -> (least share of agreeing discrete actions, largest relative error of a float output)
TOLERANCES = {("onnx", "none"): (0.99, 1e-4), ("litert", "none"): (0.99, 1e-4),
              ("litert", "float16"): (0.97, 1e-2), ("litert", "int8"): (0.90, 5e-2)}


def recorded_observations(reference: serving.ServedPolicy, env: envs.EnvSpec, count: int,
                          seed: int) -> np.ndarray:
    """`count` observations (a batch as the policy takes it) met playing `env` with the reference policy."""
    vector_env = envs.make_vector_env(env, min(8, count), seed=seed)
    rng = np.random.default_rng(seed)
    try:
        batch, rows = vector_env.first_obs, []
        while sum(len(b) for b in rows) < count:
            rows.append(batch)
            actions = reference.policy(batch)
            explore = rng.random(len(batch)) < RANDOM_SHARE
            if explore.any():
                actions = _with_random(actions, explore, batch, vector_env.single_action_space, rng)
            raw, *_ = vector_env.step(actions)
            batch = observations.to_batch(vector_env.obs_spec, raw)
        return np.concatenate(rows)[:count]
    finally:
        vector_env.close()


def _with_random(actions: np.ndarray, explore: np.ndarray, batch: np.ndarray, space: gym.Space,
                 rng: np.random.Generator) -> np.ndarray:
    """`actions` with a random one (a legal one where a mask is given) in the rows `explore` picks."""
    actions = actions.copy()
    legal = observations.legal_actions(batch)
    if legal is not None and not isinstance(space, gym.spaces.Discrete):
        return actions  # a MultiDiscrete mask: keep the greedy, legal actions
    for i in np.flatnonzero(explore):
        actions[i] = rng.choice(np.flatnonzero(legal[i])) if legal is not None else space.sample()
    return actions


def compare(reference: serving.ServedPolicy, converted, batch: np.ndarray, fmt: str, quantize: str) -> dict:
    """{"passed", "observations", "action_agreement" (discrete) or "action_max_error", "max_error" per float
    output, "tolerance", "summary"}."""
    agreement_needed, error_allowed = TOLERANCES[(fmt, quantize)]
    want, got = reference.outputs(batch), converted.outputs(batch)
    report = {"observations": int(len(batch)), "tolerance": {"agreement": agreement_needed, "error": error_allowed},
              "max_error": {}}
    problems = []
    for name, expected in want.items():
        actual = np.asarray(got[name]).reshape(np.shape(expected))
        if np.issubdtype(np.asarray(expected).dtype, np.integer):
            share = float(np.mean(np.all((actual == expected).reshape(len(batch), -1), axis=1)))
            report[f"{name}_agreement"] = share
            if share < agreement_needed:
                problems.append(f"{name} agrees on {share:.1%}, needs {agreement_needed:.0%}")
            continue
        scale = max(1.0, float(np.max(np.abs(expected))))
        error = float(np.max(np.abs(actual.astype(np.float64) - expected))) / scale
        report["max_error"][name] = error
        if not error <= error_allowed:  # NaN fails too
            problems.append(f"{name} off by {error:.2g} of its scale, allowed {error_allowed:g}")
    problems += _illegal_actions(batch, np.asarray(got["action"]))
    report["passed"] = not problems
    report["summary"] = "; ".join(problems) or "within tolerance"
    return report


def _illegal_actions(batch: np.ndarray, actions: np.ndarray) -> list[str]:
    legal = observations.legal_actions(batch)
    if legal is None or actions.ndim != 1:
        return []
    illegal = int(np.sum(~legal[np.arange(len(actions)), actions.astype(np.int64)]))
    return [f"{illegal} illegal actions"] if illegal else []
