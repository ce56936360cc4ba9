"""Does a converted policy answer as its SavedModel does? Observations recorded from the env, compared output by
output.

Observations come from playing the env: the SavedModel's greedy action, or with probability RANDOM_SHARE a random
(legal) one, over several episodes, so that the states are the ones a deployed policy meets, action masks
included, rather than samples of an observation space whose bounds may be infinite. A policy with memory is
compared along those episodes: each side carries its own state from step to step (zeros where an episode
starts), so a converted file whose state drifts fails however close a single step is, and the state is an output
compared as the others.

Per format and quantization (TOLERANCES): every float output (Q-values, logits, values, means, continuous actions)
must stay within `error` of the SavedModel's, relative to the larger of 1 and that output's largest magnitude over
the batch (over the legal actions, for outputs per action under a mask); discrete actions must agree on at least
`agreement` of the observations where the SavedModel's two best actions differ by more than twice that error (on
the others, an output within its tolerance may pick either), and be legal where a mask says so.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np

from tfrl import envs
from tfrl.envs import observations
from tfrl.models import serving
from tfrl.models.policy_inputs import ACTION_PART, STATE_NAME
from tfrl.models.policy_memory import reset_episodes

RANDOM_SHARE = 0.25
# (format, quantization) -> (least share of agreeing discrete actions, largest relative error of a float output)
TOLERANCES = {("onnx", "none"): (0.99, 1e-4), ("litert", "none"): (0.99, 1e-4),
              ("litert", "float16"): (0.97, 1e-2), ("litert", "int8"): (0.90, 5e-2)}


@dataclasses.dataclass(frozen=True)
class Recording:
    """Observations met playing an env: one batch per vector step (a row per sub-env), and per step the rows whose
    episodes start there (a policy with memory starts them from zeros)."""

    steps: list
    starts: list

    @property
    def batch(self) -> np.ndarray:
        return np.concatenate(self.steps)

    @classmethod
    def unordered(cls, batch: np.ndarray) -> "Recording":
        """A batch of observations of no episode: one step whose rows all start one."""
        return cls([batch], [np.ones(len(batch), bool)])


def recorded_observations(reference: serving.SavedModelPolicy, env: envs.EnvSpec, count: int,
                          seed: int) -> np.ndarray:
    """`count` observations (a batch as the policy takes it) met playing `env` with the reference policy."""
    return recorded_episodes(reference, env, count, seed).batch


def recorded_episodes(reference: serving.SavedModelPolicy, env: envs.EnvSpec, count: int, seed: int) -> Recording:
    """`count` observations met playing `env` with the reference policy, in their steps (the last one cut short)."""
    vector_env = envs.make_vector_env(env, min(8, count), seed=seed)
    rng = np.random.default_rng(seed)
    vector_env.single_action_space.seed(seed)  # its random actions: the same recording for the same seed
    reset_episodes(reference.policy)
    try:
        batch = vector_env.first_obs
        starts = np.ones(len(batch), bool)
        recording = Recording([], [])
        while sum(len(b) for b in recording.steps) < count:
            recording.steps.append(batch)
            recording.starts.append(starts)
            actions = reference.policy(batch)
            explore = rng.random(len(batch)) < RANDOM_SHARE
            if explore.any():
                actions = _with_random(actions, explore, batch, vector_env.single_action_space, rng)
            raw, _, terminated, truncated, _ = vector_env.step(actions)
            starts = np.asarray(terminated | truncated, bool)
            reset_episodes(reference.policy, starts)
            batch = observations.to_batch(vector_env.obs_spec, raw)
        extra = sum(len(b) for b in recording.steps) - count
        if extra:  # rows are sub-envs: the first rows of the last step go on their episodes
            recording.steps[-1], recording.starts[-1] = recording.steps[-1][:-extra], recording.starts[-1][:-extra]
        return recording
    finally:
        vector_env.close()


def outputs_along(policy, recording: Recording) -> dict[str, np.ndarray]:
    """policy.outputs over the recording's observations; a policy with memory steps through it carrying its own
    state (outputs(batch, state), zeros where an episode starts)."""
    state_size = getattr(policy, "state_size", 0)
    if not state_size:
        return policy.outputs(recording.batch)
    state, answers = np.zeros((len(recording.steps[0]), state_size), np.float32), []
    for batch, starts in zip(recording.steps, recording.starts):
        state = np.where(starts[:, None], np.float32(0), state[:len(starts)]).astype(np.float32)
        answer = policy.outputs(batch, state)
        state = np.asarray(answer[STATE_NAME])
        answers.append(answer)
    return {name: np.concatenate([np.asarray(answer[name]) for answer in answers]) for name in answers[0]}


def _with_random(actions: np.ndarray, explore: np.ndarray, batch: np.ndarray, space: gym.Space,
                 rng: np.random.Generator) -> np.ndarray:
    """`actions` with a random one (a legal one where a mask is given) in the rows `explore` picks."""
    legal = observations.legal_actions(batch)
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return actions if legal is not None else _with_random_parts(actions, explore, space)
    actions = actions.copy()
    if legal is not None and not isinstance(space, gym.spaces.Discrete):
        return actions  # a MultiDiscrete mask: keep the greedy, legal actions
    for i in np.flatnonzero(explore):
        actions[i] = rng.choice(np.flatnonzero(legal[i])) if legal is not None else space.sample()
    return actions


def _with_random_parts(actions, explore: np.ndarray, space: gym.spaces.Dict | gym.spaces.Tuple):
    """Hybrid actions (a dict or tuple of batches) with a random action in the rows `explore` picks."""
    parts = dict(actions) if isinstance(actions, dict) else dict(enumerate(actions))
    parts = {key: np.array(value) for key, value in parts.items()}
    for i in np.flatnonzero(explore):
        sample = space.sample()
        for key, value in (sample.items() if isinstance(sample, dict) else enumerate(sample)):
            parts[key][i] = value
    return parts if isinstance(actions, dict) else tuple(parts[i] for i in range(len(parts)))


def compare(reference: serving.SavedModelPolicy, converted, recorded: Recording | np.ndarray, fmt: str,
            quantize: str) -> dict:
    """{"passed", "observations", "action_agreement" (discrete, every row) and "action_agreement_uncontested",
    "max_error" per float output, "contested_rows", "tolerance", "summary"}.

    A float output may be off by the allowed error, so two actions whose reference scores (Q-values or logits)
    differ by at most twice that error may swap places in the converted policy: such rows are contested, and the
    actions' agreement that passes or fails the check is counted on the other rows (none left: the float errors
    decide alone). Outputs per action are compared on the legal actions (a mask's illegal logits are -1e8, and
    would set the scale). `recorded`: a Recording (a policy with memory steps along its episodes) or a batch."""
    agreement_needed, error_allowed = TOLERANCES[(fmt, quantize)]
    recording = recorded if isinstance(recorded, Recording) else Recording.unordered(recorded)
    batch = recording.batch
    want, got = outputs_along(reference, recording), outputs_along(converted, recording)
    legal = observations.legal_actions(batch)
    groups = _part_groups(reference)  # a hybrid action's discrete parts: their logits' columns
    contested = {name: _contested_rows(want, legal, error_allowed, name, groups.get(name)) for name in want}
    report = {"observations": int(len(batch)), "tolerance": {"agreement": agreement_needed, "error": error_allowed},
              "max_error": {}, "contested_rows": int(np.any(list(contested.values()), axis=0).sum())}
    problems = []
    hybrid = any(name.startswith(ACTION_PART) for name in want)
    for name, expected in want.items():
        if hybrid and name == "action":  # its parts side by side: they are compared one by one
            continue
        expected = np.asarray(expected)
        actual = np.asarray(got[name]).reshape(np.shape(expected))
        if expected.dtype == np.bool_:  # a flag (no_legal_action): equal, row for row
            if not np.array_equal(actual.astype(bool), expected):
                problems.append(f"{name} differs on {int(np.sum(actual.astype(bool) != expected))} rows")
            continue
        if np.issubdtype(expected.dtype, np.integer):
            agrees = np.all((actual == expected).reshape(len(batch), -1), axis=1)
            report[f"{name}_agreement"] = float(np.mean(agrees))  # what a user of the file sees
            if (~contested[name]).any():
                share = report[f"{name}_agreement_uncontested"] = float(np.mean(agrees[~contested[name]]))
                if share < agreement_needed:
                    problems.append(f"{name} agrees on {share:.1%} of the uncontested observations, needs "
                                    f"{agreement_needed:.0%}")
            continue
        counted = _counted(expected, legal)
        error = float(np.max(np.abs(actual.astype(np.float64) - expected)[counted], initial=0.0))  # NaN stays NaN
        error /= _scale(expected, counted)
        report["max_error"][name] = error
        if not error <= error_allowed:  # NaN fails too
            problems.append(f"{name} off by {error:.2g} of its scale, allowed {error_allowed:g}")
    problems += _illegal_actions(legal, np.asarray(got["action"]))
    for name, columns in groups.items():
        problems += _illegal_actions(legal, np.asarray(got[name]), columns, name)
    report["passed"] = not problems
    report["summary"] = "; ".join(problems) or "within tolerance"
    return report


def _contested_rows(want: dict, legal: np.ndarray | None, error_allowed: float, name: str = "action",
                    columns: list | None = None) -> np.ndarray:
    """bool [N]: the rows where output `name` (a Discrete action [N] beside q_values or logits [N, A], or a hybrid
    action's discrete part, whose dimensions' logits are `columns`) has two best legal reference scores within
    twice the allowed error of their scale; none without such scores."""
    action = np.asarray(want[name])
    scores = want.get("q_values", want.get("logits"))
    rows = np.zeros(len(action), bool)
    if columns is None:
        if name != "action" or scores is None or action.ndim != 1 or np.ndim(scores) != 2 or np.shape(scores)[1] < 2:
            return rows
        columns = [np.arange(np.shape(scores)[1])]
    for dimension in columns:
        part = np.asarray(scores, np.float64)[:, dimension]
        part_legal = legal[:, dimension] if legal is not None else None
        counted = _counted(part, part_legal)
        top_two = np.sort(np.where(counted, part, -np.inf), axis=1)[:, -2:]
        with np.errstate(invalid="ignore"):
            margin = top_two[:, 1] - top_two[:, 0]  # inf where one action is legal: never contested
        rows |= margin <= 2.0 * error_allowed * _scale(part, counted)
    return rows


def _part_groups(reference) -> dict[str, list[np.ndarray]]:
    """{"action.<key>": its logit columns, one array per dimension} of each discrete part of a hybrid action (the
    metadata's parts; their logits come first, in the parts' order); {} for other policies."""
    space = ((getattr(reference, "metadata", None) or {}).get("action_space") or {})
    groups, at = {}, 0
    for part in space.get("parts") or ():
        if part.get("kind") == "continuous":
            continue
        dimensions = []
        for n in part.get("nvec") or ():
            dimensions.append(np.arange(at, at + int(n)))
            at += int(n)
        groups[f"{ACTION_PART}{part['key']}"] = dimensions
    return groups


def _counted(values: np.ndarray, legal: np.ndarray | None) -> np.ndarray:
    """bool, values' shape: the entries compared; an output per action under a mask, its legal actions only."""
    return legal if legal is not None and values.shape == legal.shape else np.ones(values.shape, bool)


def _scale(values: np.ndarray, counted: np.ndarray) -> float:
    """The larger of 1 and the largest magnitude among the counted entries."""
    return max(1.0, float(np.max(np.abs(values[counted]), initial=0.0)))


def _illegal_actions(legal: np.ndarray | None, actions: np.ndarray, columns: list | None = None,
                     name: str = "action") -> list[str]:
    """A problem where a discrete action (or a hybrid action's discrete part, its dimensions' mask columns
    `columns`) takes a value its mask forbids."""
    if legal is None or (columns is None and actions.ndim != 1):
        return []
    columns = columns if columns is not None else [np.arange(legal.shape[1])]
    actions = actions.reshape(len(actions), -1).astype(np.int64)
    illegal = sum(int(np.sum(~legal[:, dimension][np.arange(len(actions)), actions[:, d]]))
                  for d, dimension in enumerate(columns))
    return [f"{illegal} illegal {'actions' if name == 'action' else f'values of {name}'}"] if illegal else []
