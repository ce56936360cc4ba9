"""The example envs with structure (tfrl.envs.example_envs): spaces, seeding, the stated optimal returns reached by
scripted optimal policies and missed by random ones, the action mask, and the registered ids."""

import itertools
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tfrl import envs
from tfrl.envs import example_envs
from tfrl.envs.example_envs import GoalGrid, GoalPoint, MaskedPick, MultiKnob, PickAndAim, RecallPick, Switches

IDS = ["tfrl/GoalGrid-v0", "tfrl/GoalPoint-v0", "tfrl/MaskedPick-v0", "tfrl/MultiKnob-v0", "tfrl/Switches-v0",
       "tfrl/RecallPick-v0", "tfrl/PickAndAim-v0"]


def run_episode(env, policy, seed):
    """(return, reset info, observations, rewards) of one episode of `policy(observation, env)` from `seed`."""
    obs, info = env.reset(seed=seed)
    observations, rewards, done = [obs], [], False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy(obs, env))
        observations.append(obs)
        rewards.append(reward)
        done = terminated or truncated
    return sum(rewards), info, observations, rewards


def random_policy(obs, env):
    return env.action_space.sample()


def grid_greedy(obs, env):
    """Shortest path: rows first, then columns."""
    size = env.unwrapped.size
    row, column = np.rint(obs["position"] * (size - 1)).astype(int)
    goal_row, goal_column = divmod(int(obs["goal"]), size)
    if row != goal_row:
        return 0 if goal_row < row else 1
    return 2 if goal_column < column else 3


def point_straight(obs, env):
    """Full speed straight at the goal, exactly onto it when it is closer than a step."""
    direction = (obs["goal"].astype(np.float64) - obs["position"]) / env.unwrapped.max_step
    return (direction / max(1.0, np.linalg.norm(direction))).astype(np.float32)


def best_legal(obs, env):
    payoffs = np.where(obs["action_mask"] == 1, obs["state"], -1.0)
    return int(np.argmax(payoffs))


def knob_targets(obs, env):
    nvec = env.unwrapped.action_space.nvec
    return np.array([int(np.argmax(part)) for part in np.split(obs, np.cumsum(nvec)[:-1])], np.int64)


def switch_pattern(obs, env):
    return obs.astype(np.int8)


def recall_cue(obs, env):
    """The cue (read from the env: this scripted policy's memory) when it is legal, else any legal action."""
    legal = np.flatnonzero(obs["action_mask"])
    cue = env.unwrapped._cue
    return cue if cue in legal else legal[0]


def pick_and_aim(obs, env):
    """The cued tool, aimed at its target."""
    tool = int(np.argmax(obs[:env.unwrapped.num_tools]))
    return {"tool": tool, "aim": obs[env.unwrapped.num_tools + tool:][:1].copy()}


# Well above each random policy's mean return (GoalGrid about -0.46, GoalPoint -52, MaskedPick -0.9, MultiKnob
# 5.3, Switches 10, RecallPick -0.4, PickAndAim about 1.5), well below the optimal one's (0.88, -6, 20, 20, 20,
# 3.5, 10).
RANDOM_STAYS_BELOW = {"tfrl/GoalGrid-v0": 0.0, "tfrl/GoalPoint-v0": -30.0, "tfrl/MaskedPick-v0": 2.0,
                      "tfrl/MultiKnob-v0": 8.0, "tfrl/Switches-v0": 12.0, "tfrl/RecallPick-v0": 1.0,
                      "tfrl/PickAndAim-v0": 4.0}

OPTIMAL_POLICIES = {"tfrl/GoalGrid-v0": grid_greedy, "tfrl/GoalPoint-v0": point_straight,
                    "tfrl/MaskedPick-v0": best_legal, "tfrl/MultiKnob-v0": knob_targets,
                    "tfrl/Switches-v0": switch_pattern, "tfrl/RecallPick-v0": recall_cue,
                    "tfrl/PickAndAim-v0": pick_and_aim}


@pytest.mark.parametrize("env_class", [GoalGrid, GoalPoint, MaskedPick, MultiKnob, Switches, RecallPick, PickAndAim])
def test_env_checker_passes(env_class):
    env = env_class()
    check_env(env, skip_render_check=True)  # raises on a broken API
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert env.observation_space.contains(env.step(env.action_space.sample())[0])


def test_spaces_are_as_documented():
    grid = GoalGrid(size=7)
    assert grid.observation_space == gym.spaces.Dict({
        "position": gym.spaces.Box(0, 1, (2,), np.float32), "goal": gym.spaces.Discrete(49),
        "steps_left": gym.spaces.Box(0, 1, (1,), np.float32)})
    assert grid.action_space == gym.spaces.Discrete(4) and grid.max_steps == 28
    square = gym.spaces.Box(-1, 1, (2,), np.float32)
    point = GoalPoint()
    assert point.observation_space == gym.spaces.Dict({"position": square, "goal": square})
    assert point.action_space == square
    pick = MaskedPick()
    assert pick.observation_space == gym.spaces.Dict({"state": gym.spaces.Box(0, 1, (10,), np.float32),
                                                      "action_mask": gym.spaces.Box(0, 1, (10,), np.int8)})
    assert pick.action_space == gym.spaces.Discrete(10)
    knob = MultiKnob()
    assert knob.action_space == gym.spaces.MultiDiscrete([3, 4, 5])
    assert knob.observation_space == gym.spaces.Box(0, 1, (12,), np.float32)
    assert MultiKnob(nvec=[2, 6]).observation_space.shape == (8,)
    switches = Switches()
    assert switches.action_space == gym.spaces.MultiBinary(6)
    assert switches.observation_space == gym.spaces.Box(0, 1, (6,), np.float32)


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_same_episode_and_other_seeds_other_episodes(env_id):
    env = gym.make(env_id)

    def episode(seed):
        env.action_space.seed(seed)  # the random actions too
        _, _, observations, rewards = run_episode(env, random_policy, seed)
        return [gym.spaces.flatten(env.observation_space, obs) for obs in observations], rewards

    first, again = episode(3), episode(3)
    assert len(first[0]) == len(again[0]) and first[1] == again[1]
    assert all(np.array_equal(a, b) for a, b in zip(first[0], again[0]))
    starts = {tuple(episode(seed)[0][0]) for seed in range(10)}
    assert len(starts) > 1


@pytest.mark.parametrize("env_id", IDS)
def test_scripted_optimal_policy_reaches_the_optimal_return_and_random_falls_clearly_short(env_id):
    env = gym.make(env_id)
    env.action_space.seed(0)
    optimal, random = [], []
    for seed in range(100):
        episode_return, info, _, _ = run_episode(env, OPTIMAL_POLICIES[env_id], seed)
        assert episode_return == pytest.approx(info["optimal_return"], abs=1e-4)
        optimal.append(episode_return)
        random.append(run_episode(env, random_policy, 1000 + seed)[0])
    assert np.mean(random) < RANDOM_STAYS_BELOW[env_id] < np.mean(optimal)


@pytest.mark.parametrize("env, policy", [(MaskedPick(num_actions=4, horizon=7), best_legal),
                                         (MultiKnob(nvec=[2, 6], horizon=7), knob_targets),
                                         (Switches(n=3, horizon=7), switch_pattern)])
def test_fixed_horizon_envs_score_their_horizon(env, policy):
    episode_return, info, observations, _ = run_episode(env, policy, seed=1)
    assert episode_return == info["optimal_return"] == 7 and len(observations) == 8


def test_goal_grid_optimal_return_formula_and_its_mean_over_starts():
    assert example_envs.goal_grid_optimal_return((0, 0), (0, 1)) == 1.0  # one step: the goal's +1 only
    assert example_envs.goal_grid_optimal_return((0, 0), (4, 4)) == pytest.approx(1 - 0.05 * 7)
    for size in (2, 3, 5, 8):
        cells = list(itertools.product(range(size), repeat=2))
        returns = [example_envs.goal_grid_optimal_return(a, b, size) for a, b in itertools.permutations(cells, 2)]
        assert example_envs.goal_grid_mean_optimal_return(size) == pytest.approx(np.mean(returns))
    with pytest.raises(ValueError, match="distinct cells"):
        example_envs.goal_grid_optimal_return((1, 1), (1, 1))


def test_goal_grid_walls_steps_left_and_time_limit():
    env = GoalGrid(size=3)
    obs, _ = env.reset(seed=0)
    goal_row, goal_column = divmod(int(obs["goal"]), 3)
    away = 0 if goal_row == 2 else 1  # up if the goal is on the bottom row, else down: never reaches it
    for step in range(1, 13):
        obs, reward, terminated, truncated, _ = env.step(away)
        assert reward == -0.05 and not terminated and truncated == (step == 12)
        assert obs["steps_left"][0] == pytest.approx((12 - step) / 12)
        if step >= 2:
            assert obs["position"][0] in (0.0, 1.0)  # pinned against the wall
    with pytest.raises(ValueError, match="GoalGrid takes actions 0 .up., 1 .down., 2 .left., 3 .right.; got 4"):
        env.step(4)


def test_goal_point_bound_holds_for_other_policies_and_moves_are_clipped():
    env = GoalPoint()
    rng = np.random.default_rng(0)

    def noisy(obs, env):
        return np.clip(point_straight(obs, env) + rng.normal(0, 0.3, 2), -1, 1).astype(np.float32)

    for seed in range(20):
        episode_return, info, _, _ = run_episode(env, noisy, seed)
        assert episode_return <= info["optimal_return"] + 1e-4
    obs, _ = env.reset(seed=0)
    moved, *_ = env.step(np.array([1, 1], np.float32))  # norm sqrt(2): scaled to a step of max_step
    assert np.linalg.norm(moved["position"] - obs["position"]) <= 0.1 + 1e-6
    assert env.observation_space.contains(moved)
    with pytest.raises(ValueError, match="2 finite numbers"):
        env.step(np.array([np.nan, 0], np.float32))


def test_masked_pick_mask_matches_action_masks_and_has_one_to_three_legal_actions():
    env = gym.make("tfrl/MaskedPick-v0")
    obs, _ = env.reset(seed=5)
    counts = set()
    for _ in range(20):
        mask = env.unwrapped.action_masks()
        assert mask.dtype == bool and np.array_equal(mask, obs["action_mask"] == 1)
        counts.add(int(mask.sum()))
        obs, reward, terminated, _, _ = env.step(best_legal(obs, env))
        assert reward == 1.0 and not terminated
    assert counts == {1, 2, 3}


def test_masked_pick_other_legal_actions_pay_nothing_and_illegal_ones_end_the_episode():
    env = MaskedPick()
    obs, _ = env.reset(seed=0)
    while obs["action_mask"].sum() < 2:
        obs, *_ = env.step(best_legal(obs, env))
    other = [a for a in np.flatnonzero(obs["action_mask"]) if a != best_legal(obs, env)][0]
    obs, reward, terminated, truncated, _ = env.step(other)
    assert (reward, terminated, truncated) == (0.0, False, False)
    illegal = int(np.flatnonzero(obs["action_mask"] == 0)[0])
    _, reward, terminated, truncated, info = env.step(illegal)
    assert (reward, terminated, truncated, info) == (-1.0, True, False, {"illegal_action": True})


def test_masked_pick_cannot_be_solved_without_the_mask():
    """Decoys: illegal actions show payoff 1 too, so picking a 1 without the mask mostly ends the episode."""
    env = MaskedPick()
    rng = np.random.default_rng(0)

    def mask_blind(obs, env):
        return int(rng.choice(np.flatnonzero(obs["state"] == 1)))

    assert np.mean([run_episode(env, mask_blind, seed)[0] for seed in range(200)]) < 1.0


def test_masked_pick_raises_on_illegal_actions_when_asked_and_rejects_bad_settings():
    env = MaskedPick(illegal="raise")
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action \d is illegal at step 0 \(legal: \["):
        env.step(int(np.flatnonzero(obs["action_mask"] == 0)[0]))
    for bad in (10, -1, 1.0, np.array([1])):
        with pytest.raises(ValueError, match="MaskedPick takes actions 0 to 9, got"):
            env.step(bad)
    assert env.step(np.array(int(np.argmax(obs["action_mask"]))))[1] in (0.0, 1.0)  # a 0-d integer array is fine
    with pytest.raises(ValueError, match="illegal is 'penalty' or 'raise'"):
        MaskedPick(illegal="ignore")
    with pytest.raises(ValueError, match="1 <= max_legal <= num_actions"):
        MaskedPick(num_actions=2, max_legal=3)


def test_target_matching_rewards_count_matching_entries_and_bad_actions_raise():
    knobs = MultiKnob()
    obs, _ = knobs.reset(seed=0)
    action = knob_targets(obs, knobs)
    action[0] = (action[0] + 1) % 3
    assert knobs.step(action)[1] == pytest.approx(2 / 3)
    for bad in (np.array([0, 0, 5]), np.array([0, 0]), np.array([0.0, 0.0, 0.0])):
        with pytest.raises(ValueError, match="MultiKnob takes MultiDiscrete"):
            knobs.step(bad)
    switches = Switches(n=4)
    obs, _ = switches.reset(seed=0)
    assert switches.step(1 - switch_pattern(obs, switches))[1] == 0.0
    with pytest.raises(ValueError, match="Switches takes MultiBinary"):
        switches.step(np.array([0, 2, 0, 0]))


def test_importing_tfrl_envs_registers_the_ids():
    code = f"import gymnasium, tfrl.envs\nprint([gymnasium.make(env_id).spec.id for env_id in {IDS!r}])"
    made = subprocess.run([sys.executable, "-c", code], check=True, timeout=120, capture_output=True, text=True)
    assert made.stdout.strip() == repr(list(IDS))


def test_ids_registered_once_and_made_by_gymnasium():
    example_envs.register()  # again: nothing changes
    for env_id in IDS:
        assert env_id in gym.registry
        env = gym.make(env_id)
        assert isinstance(env.unwrapped, example_envs._ENTRY_POINTS[env_id])
    assert gym.make("tfrl/GoalGrid-v0", size=4).unwrapped.size == 4


def test_masked_pick_with_another_mask_key_gives_the_mask_as_an_input_and_no_mask_source():
    env_spec = envs.as_spec("tfrl/MaskedPick-v0", {"mask_key": "legal"})
    vector_env = envs.make_vector_env(env_spec, 1, seed=0)
    try:
        info = envs.env_info(vector_env, "tfrl/MaskedPick-v0")
        assert not info.masked and {field.key for field in info.obs_fields} == {"legal", "state"}
    finally:
        vector_env.close()
    env = MaskedPick(mask_key="legal")
    obs, _ = env.reset(seed=3)
    illegal = int(np.flatnonzero(obs["legal"] == 0)[0])
    assert env.step(illegal)[1:3] == (MaskedPick.ILLEGAL_REWARD, True)
    with pytest.raises(ValueError, match="mask_key"):
        MaskedPick(mask_key="state")


def test_recall_pick_shows_the_cue_once_then_two_legal_actions_and_pays_the_cue():
    env = RecallPick(num_actions=5, horizon=6)
    obs, info = env.reset(seed=2)
    cue = int(np.argmax(obs["cue"]))
    assert obs["cue"].sum() == 1 and obs["action_mask"].all()  # the cue's step: everything legal
    masks, returns = [], 0.0
    obs, reward, terminated, truncated, _ = env.step((cue + 1) % 5)  # no reward on the cue's step, whatever
    assert reward == 0.0 and not terminated
    while not truncated:
        assert not obs["cue"].any() and obs["action_mask"].sum() == 2
        assert (env.action_masks() == obs["action_mask"]).all()
        masks.append(obs["action_mask"].copy())
        legal = np.flatnonzero(obs["action_mask"])
        other = legal[legal != cue][0]
        obs, reward, terminated, truncated, _ = env.step(cue if cue in legal else other)
        assert reward == float(cue in legal) and not terminated
        returns += reward
    assert len(masks) == 5 and returns == info["optimal_return"] == sum(m[cue] for m in masks)


def test_recall_pick_without_memory_gets_half_and_illegal_actions_end_or_raise():
    # The best policy without memory: a legal action at random (the two are alike to it): half the optimum.
    env, rng = RecallPick(), np.random.default_rng(0)
    optimum, memoryless = 0.0, 0.0
    for seed in range(400):
        obs, info = env.reset(seed=seed)
        optimum += info["optimal_return"]
        truncated = False
        while not truncated:
            obs, reward, _, truncated, _ = env.step(rng.choice(np.flatnonzero(obs["action_mask"])))
            memoryless += reward
    assert 3.3 < optimum / 400 < 3.7 and abs(memoryless / optimum - 0.5) < 0.05
    obs, _ = env.reset(seed=0)
    env.step(0)
    illegal = int(np.flatnonzero(env.action_masks() == 0)[0])
    assert env.step(illegal)[1:3] == (RecallPick.ILLEGAL_REWARD, True)
    raising = RecallPick(illegal="raise")
    raising.reset(seed=0)
    raising.step(0)
    with pytest.raises(ValueError, match="is illegal at step 1"):
        raising.step(int(np.flatnonzero(raising.action_masks() == 0)[0]))
    for bad in ({"num_actions": 1}, {"horizon": 1}, {"illegal": "ignore"}):
        with pytest.raises(ValueError, match="RecallPick"):
            RecallPick(**bad)


def test_pick_and_aim_pays_the_right_tool_by_its_aim_and_refuses_what_its_space_lacks():
    env = PickAndAim()
    assert env.action_space == gym.spaces.Dict({"tool": gym.spaces.Discrete(3),
                                                "aim": gym.spaces.Box(-1, 1, (1,), np.float32)})
    obs, info = env.reset(seed=4)
    assert obs.shape == (6,) and obs[:3].sum() == 1 and info["optimal_return"] == 10.0
    tool = int(np.argmax(obs[:3]))
    target = float(obs[3 + tool])
    # Off by 0.25 with the right tool: 0.75. Any aim with another tool: 0. Off by more than 1: 0, not negative.
    assert env.step({"tool": tool, "aim": np.float32([target + 0.25])})[1] == pytest.approx(0.75, abs=1e-6)
    assert env.step({"tool": (tool + 1) % 3, "aim": np.float32([0.0])})[1] == 0.0
    env.reset(seed=4)
    assert env.step({"tool": tool, "aim": np.float32([1.0 if target < 0 else -1.0])})[1] == max(
        0.0, 1.0 - abs((1.0 if target < 0 else -1.0) - target))
    for bad in ({"tool": 3, "aim": np.float32([0.0])}, {"tool": 0, "aim": np.float32([1.5])},
                {"tool": 0, "aim": np.float32([0.0, 0.0])}, {"tool": 0}, (0, np.float32([0.0]))):
        with pytest.raises(ValueError, match="PickAndAim takes Dict"):
            env.step(bad)
