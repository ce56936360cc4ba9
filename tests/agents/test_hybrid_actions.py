"""Hybrid actions (Dict and Tuple action spaces of Discrete, MultiDiscrete, MultiBinary and Box parts) for A2C and
PPO: the head's math by hand, what EnvInfo reads and refuses, and end to end on tfrl/PickAndAim-v0 (a Dict of a
Discrete tool and a Box aim) and structure_envs:MaskedHybrid-v0 (a Tuple whose Discrete part is masked): training
(from tfrl.train and the CLI), resume, evaluation, the export's named outputs, tfrl-serve, LiteRT and ONNX, and the
loaders giving what the env's step takes."""

import json
import os
import pathlib
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import tfrl
from tfrl import envs
from tfrl.agents.actor_critic.feedforward import actor_critic_network
from tfrl.agents.actor_critic.heads import HybridHead, masked_logits_numpy
from tfrl.envs.env_info import ActionPart, EnvInfo
from tfrl.errors import UsageError
from tfrl.model_server.options import ServerOptions
from tfrl.models import export, policy_inputs
from tfrl.models.policy_inputs import MASK_KEY
from tfrl.models.portable import convert, parity
from tfrl.run import evaluation, launch, runs

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests"))
import serving_helpers  # noqa: E402
import tf_free  # noqa: E402
import structure_envs  # noqa: E402  (registers the envs)

ENV = "tfrl/PickAndAim-v0"
PPO = {"total_env_steps": 8192, "num_envs": 8, "rollout_length": 128, "batch_size": 64, "n_epochs": 4,
       "hidden_sizes": [32], "gamma": 0.0, "eval_interval": 0, "final_eval_episodes": 8, "checkpoint_interval": 2048,
       "log_interval": 2048}
A2C = {"total_env_steps": 1024, "num_envs": 4, "hidden_sizes": [16], "eval_interval": 0, "final_eval_episodes": 4,
       "checkpoint_interval": 0, "log_interval": 512}
TOOL = ActionPart("tool", "discrete", nvec=(3,))
AIM = ActionPart("aim", "continuous", shape=(1,), low=(-1.0,), high=(1.0,))


# ---- the head -------------------------------------------------------------------------------------------------

def test_the_hybrid_head_sums_its_parts_log_probabilities_and_entropies_by_hand():
    # params: the tool's logits [0, ln 2, ln 3], the aim's mean 0.5, its log std ln 2 (std 2).
    head = HybridHead((TOOL, AIM), "Dict")
    assert head.num_params == 5 and head.log_std_size == 1 and head.stored_shape == (2,)
    params = np.array([[0.0, np.log(2.0), np.log(3.0), 0.5, np.log(2.0)]], np.float32)
    actions = np.array([[1.0, 2.5]], np.float32)  # tool 1, aim 2.5: one std above the mean
    gaussian = -0.5 - np.log(2.0) - 0.5 * np.log(2 * np.pi)
    # Unmasked: pi(tool 1) = 2 / 6. Masked with tool 2 illegal: 2 / 3 (the mask covers the tool's logits only).
    np.testing.assert_allclose(head.log_prob(tf.constant(params), tf.constant(actions)).numpy(),
                               [np.log(2 / 6) + gaussian], rtol=1e-6)
    np.testing.assert_allclose(head.log_prob_numpy(params, actions), [np.log(2 / 6) + gaussian], rtol=1e-6)
    legal = np.array([[True, True, False]])
    np.testing.assert_allclose(head.log_prob(tf.constant(params), tf.constant(actions), tf.constant(legal)).numpy(),
                               [np.log(2 / 3) + gaussian], rtol=1e-6)
    # H = H(1/3, 2/3) + 0.5 + 0.5 ln(2 pi) + ln 2.
    entropy = 0.636514 + 0.5 + 0.5 * np.log(2 * np.pi) + np.log(2.0)
    np.testing.assert_allclose(head.entropy(tf.constant(params), tf.constant(legal)).numpy(), [entropy], rtol=1e-5)
    # Sampling under the mask never picks tool 2; the mode is (argmax, mean); the env gets {key: part}.
    rng = np.random.default_rng(0)
    masked = masked_logits_numpy(np.repeat(params, 500, axis=0), np.repeat(legal, 500, axis=0))
    sampled = head.sample(rng, masked)
    assert set(sampled[:, 0].tolist()) == {0.0, 1.0} and sampled.shape == (500, 2)
    assert 1.7 < np.std(sampled[:, 1]) < 2.3  # std 2, unclipped as stored
    np.testing.assert_array_equal(head.mode(params), [[2.0, 0.5]])
    env_action = head.env_action(np.array([[1.0, 2.5], [0.0, -0.25]], np.float32))
    assert env_action["tool"].tolist() == [1, 0] and env_action["tool"].dtype == np.int32
    np.testing.assert_array_equal(env_action["aim"], [[1.0], [-0.25]])  # clipped to the Box
    as_tuple = HybridHead((TOOL, AIM), "Tuple").env_action(np.array([[2.0, 0.0]], np.float32))
    assert isinstance(as_tuple, tuple) and as_tuple[0].tolist() == [2]


def test_the_network_puts_the_log_stds_after_the_logits_and_means():
    network = actor_critic_network((4,), 5, (8,), log_std_size=1, log_std_init=-0.5)
    params, _ = network(np.zeros((2, 4), np.float32))
    assert params.shape == (2, 5)
    np.testing.assert_allclose(params.numpy()[:, 4], [-0.5, -0.5])


# ---- what EnvInfo reads and refuses -----------------------------------------------------------------------------

def _info(env) -> EnvInfo:
    vector_env = envs.make_vector_env(envs.as_spec(env), 1, seed=0)
    try:
        return envs.env_info(vector_env, str(env))
    finally:
        vector_env.close()


def test_dict_and_tuple_action_spaces_become_parts_and_round_trip_through_config_json():
    info = _info(ENV)
    assert info.action_kind == "hybrid" and info.action_container == "Dict" and info.num_actions == 3
    assert [(part.key, part.kind) for part in info.action_parts] == [("aim", "continuous"), ("tool", "discrete")]
    assert EnvInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info
    masked = _info("structure_envs:MaskedHybrid-v0")
    assert masked.action_container == "Tuple" and masked.mask_groups == (4,) and not masked.continuous


def test_spaces_and_masks_that_do_not_fit_are_one_line(tmp_path):
    class Nested(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (2,))
        action_space = gym.spaces.Dict({"arm": gym.spaces.Dict({"grip": gym.spaces.Discrete(2)})})

    class Scalar(Nested):
        action_space = gym.spaces.Dict({"force": gym.spaces.Box(-1.0, 1.0, ())})

    with pytest.raises(UsageError, match=r"has a nested action space \(part 'arm' is Dict"):
        _info(Nested)
    with pytest.raises(UsageError, match=r"action part 'force' is a Box of shape \(\); give it shape \(1,\)"):
        _info(Scalar)
    with pytest.raises(UsageError, match=r"its 'action_mask' has 6 entries, but its discrete action parts \('0': 4\) "
                                         r"have 4 values: one entry per value of each discrete part, in the parts' "
                                         r"order; Box parts \('1'\) take none"):
        _info(envs.as_spec("structure_envs:MaskedHybrid-v0", {"mask_size": 6}))
    with pytest.raises(UsageError, match="--agent=dqn acts in discrete action spaces; tfrl/PickAndAim-v0 has Dict "
                                         r"\(hybrid\) actions: use --agent=a2c or --agent=ppo"):
        tfrl.train("dqn", ENV, run_dir=tmp_path / "dqn", verbose=0)
    assert not (tmp_path / "dqn").exists()


# ---- end to end -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """PPO on PickAndAim (stopped after 4 rollouts and resumed), A2C on MaskedHybrid (an illegal pick raises) and
    A2C with memory on PickAndAim."""
    base = tmp_path_factory.mktemp("hybrid")
    polls = []
    prepared = launch.prepare(launch.TrainRequest(agent="ppo", env=ENV, preset="none", hp=PPO, run_dir=base / "ppo"))
    stopped = launch.execute(prepared, stop_requested=lambda: polls.append(1) or len(polls) > 4)
    assert stopped.record["kind"] == "stopped", stopped.record
    ppo = tfrl.train("ppo", ENV, preset="none", hp=PPO, run_dir=base / "ppo", verbose=0)
    masked = tfrl.train("a2c", "structure_envs:MaskedHybrid-v0", preset="none", hp=A2C, run_dir=base / "masked",
                        verbose=0)
    memory = tfrl.train("a2c", ENV, preset="none", hp={**A2C, "lstm_units": 8}, run_dir=base / "memory", verbose=0)
    return {"ppo": ppo, "masked": masked, "memory": memory, "stopped_at": stopped.record["env_step"], "base": base}


def _obs(rows: int, seed: int = 0) -> np.ndarray:
    obs = np.zeros((rows, 6), np.float32)
    rng = np.random.default_rng(seed)
    obs[np.arange(rows), rng.integers(0, 3, rows)] = 1.0
    obs[:, 3:] = rng.uniform(-0.8, 0.8, (rows, 3))
    return obs


def test_ppo_learns_to_pick_and_aim_after_a_resume_and_exports_one_output_per_part(trained):
    run = trained["ppo"]
    records = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert 0 < trained["stopped_at"] < 8192 and {"kind": "resume", "env_step": trained["stopped_at"]} in records
    assert run.complete and run.result["return_mean"] > 5.0  # random play: 10 steps x 1/3 x about 0.5
    metadata = export.read_metadata(run.saved_model)
    assert metadata["action_space"]["type"] == "Dict"
    assert [part["key"] for part in metadata["action_space"]["parts"]] == ["aim", "tool"]
    outputs = metadata["signature"]["outputs"]
    assert outputs["action.tool"] == "int64 [None]" and outputs["action.aim"] == "float32 [None, 1]"
    assert outputs["action"] == "float32 [None, 2]"  # aim and tool side by side
    for policy in (tfrl.load_policy(run.saved_model), tfrl.load_policy(run.run_dir)):
        batch = policy(_obs(5))
        assert set(batch) == {"tool", "aim"} and batch["tool"].shape == (5,) and batch["aim"].shape == (5, 1)
        one = policy(_obs(1)[0])
        assert gym.make(ENV).action_space.contains({"tool": int(one["tool"]), "aim": one["aim"]})
        full = policy.outputs(_obs(5))
        np.testing.assert_array_equal(full["action"], np.stack([full["action.aim"][:, 0], full["action.tool"]], -1))
    # Evaluated through the export as through the run: the env's step takes the loader's dict.
    returns = evaluation.evaluate(tfrl.load_policy(run.saved_model), ENV, 8, seed=3)
    assert returns.shape == (8,) and returns.mean() > 5.0


@pytest.mark.parametrize("part", [{"key": "tool", "kind": "discrete", "nvec": [0]},
                                  {"key": "tool", "kind": "dial", "nvec": [3]},
                                  {"key": "aim", "kind": "continuous", "shape": [2], "low": [-1.0], "high": [1.0]}])
def test_a_config_json_whose_action_parts_make_no_space_is_one_line(trained, tmp_path, part):
    record = json.loads((trained["ppo"].run_dir / "config.json").read_text())
    record["env_info"]["action_parts"][1 if part["key"] == "tool" else 0] = part
    (tmp_path / "config.json").write_text(json.dumps(record))
    with pytest.raises(UsageError, match="'env_info' is not a valid record of the env's spaces"):
        runs.read_config(tmp_path)


def test_the_loaders_give_dicts_and_tuples_of_parts_however_many():
    outputs = {f"action.{i}": np.full(2, i) for i in range(11)}  # "10" sorts before "2"
    assert [int(v[0]) for v in policy_inputs.env_actions(outputs)] == list(range(11))
    assert set(policy_inputs.env_actions(outputs, "Dict")) == {str(i) for i in range(11)}
    assert policy_inputs.action_row(policy_inputs.env_actions(outputs), 1)[3] == 3


class _Answers:
    """A policy that answers fixed outputs, with the metadata of a Tuple of Discrete(3) and Box(1) parts."""

    metadata = {"action_space": {"type": "Tuple", "parts": [{"key": "0", "kind": "discrete", "nvec": [3]},
                                                            {"key": "1", "kind": "continuous", "shape": [1]}]}}

    def __init__(self, **outputs):
        self._outputs = {name: np.asarray(value) for name, value in outputs.items()}

    def outputs(self, batch):
        return self._outputs


def test_parity_counts_a_hybrid_part_s_near_ties_and_its_illegal_values():
    # Rows 0-1: the part's two best logits 0.05 apart (a near tie at int8's 5e-2 of scale 1); row 2: decisive.
    logits = np.array([[0.50, 0.55, 0.0, 0.3, 0.0], [0.55, 0.50, 0.0, 0.3, 0.0], [0.0, 0.9, 0.0, 0.3, 0.0]])
    picks = logits[:, :3].argmax(1)
    batch = np.zeros(3, [("x", "f4", (1,)), (MASK_KEY, "u1", (3,))])
    batch[MASK_KEY] = [[1, 1, 0], [1, 1, 0], [0, 1, 1]]

    def answers(part):  # "action": the parts side by side, as the export gives it
        return _Answers(**{"action.0": part, "action.1": logits[:, 3:4], "logits": logits,
                           "action": np.c_[part, logits[:, 3]].astype(np.float32)})

    reference = answers(picks)
    swapped = picks.copy()
    swapped[:2] = 1 - swapped[:2]  # the near ties swap: allowed
    report = parity.compare(reference, answers(swapped), batch, "litert", "int8")
    assert report["contested_rows"] == 2 and report["action.0_agreement_uncontested"] == 1.0 and report["passed"]
    illegal = picks.copy()
    illegal[2] = 0  # row 2's mask forbids 0
    report = parity.compare(reference, answers(illegal), batch, "litert", "int8")
    assert not report["passed"] and "1 illegal values of action.0" in report["summary"]


def test_a_video_of_a_hybrid_policy_steps_the_env_with_each_part(trained):
    stats = {}
    frames = list(evaluation.render_episode(tfrl.load_policy(trained["masked"].saved_model),
                                            "structure_envs:MaskedHybrid-v0", seed=0, stats=stats))
    assert len(frames) == 9 and stats["length"] == 8  # the reset's frame and 8 steps


def test_the_masked_tuple_export_never_picks_an_illegal_value_and_refuses_an_empty_mask(trained):
    run = trained["masked"]
    assert run.complete  # an illegal pick would have raised in training or evaluation
    rng = np.random.default_rng(4)
    mask = (rng.random((500, 4)) < 0.3).astype(np.int8)
    mask[np.arange(500), rng.integers(0, 4, 500)] = 1
    obs = {"target": rng.uniform(-0.5, 0.5, (500, 2)).astype(np.float32), MASK_KEY: mask}
    policy = tfrl.load_policy(run.saved_model)
    pick, aim = policy(obs)
    assert mask[np.arange(500), pick].all() and aim.shape == (500, 2) and (np.abs(aim) <= 1).all()
    with pytest.raises(UsageError, match="allows no action"):
        policy({"target": np.zeros(2, np.float32), MASK_KEY: np.zeros(4, np.int8)})


def test_a_hybrid_policy_with_memory_steps_its_state(trained):
    policy = tfrl.load_policy(trained["memory"].saved_model)
    assert policy.state_size == 2 * 2 * 8
    action, state = policy.step(_obs(3), np.zeros((3, policy.state_size), np.float32))
    assert set(action) == {"tool", "aim"} and state.shape == (3, policy.state_size) and np.abs(state).max() > 0
    one = policy.outputs(_obs(1)[0], np.zeros(policy.state_size, np.float32))  # one observation, a state [S]
    assert one["state"].shape == (1, policy.state_size) and one["action.tool"].shape == (1,)


def test_tfrl_serve_answers_each_part_by_name(trained):
    run = trained["ppo"]
    expected = tfrl.load_policy(run.saved_model)(_obs(3))
    options = ServerOptions(model_name="hybrid", model_base_path=run.saved_model.parent)
    with serving_helpers.running_server(options) as (port, _):
        client = serving_helpers.Client(port)
        status, answer = client.predict("hybrid", {"instances": [row.tolist() for row in _obs(3)]})
        assert status == 200, answer
        assert [row["action.tool"] for row in answer["predictions"]] == expected["tool"].tolist()
        np.testing.assert_allclose([row["action.aim"] for row in answer["predictions"]], expected["aim"], rtol=1e-6)
        client.close()


_TF_FREE = """
import numpy as np, tfrl
obs = np.load(sys.argv[2])
result = {}
for file in ("policy.tflite", "policy.onnx"):
    actions = tfrl.load_policy(sys.argv[1] + "/" + file)(obs)
    result[file] = {key: value.tolist() for key, value in actions.items()}
"""


def test_litert_and_onnx_files_answer_each_part_without_tensorflow(trained, tmp_path):
    def finisher(env):
        return convert.finisher(("litert", "onnx"), "none", env, num_observations=200)

    version = runs.export_run(trained["ppo"].run_dir, tmp_path, "hybrid", finisher=finisher)
    for fmt in ("litert", "onnx"):
        report = export.read_metadata(version)["portable"][fmt]["parity"]
        assert report["passed"] and report["action.tool_agreement"] == 1.0, report
    np.save(tmp_path / "obs.npy", _obs(6, seed=2))
    answers = tf_free.run_json(_TF_FREE, version, tmp_path / "obs.npy")
    assert not {"tensorflow", "keras", "gymnasium", "absl"} & set(answers["loaded"]), answers["loaded"]
    expected = tfrl.load_policy(version)(_obs(6, seed=2))
    for file in ("policy.tflite", "policy.onnx"):
        assert answers[file]["tool"] == expected["tool"].tolist()
        np.testing.assert_allclose(answers[file]["aim"], expected["aim"], atol=1e-5)


def _tfrl(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "tests"))
    return subprocess.run([sys.executable, "-m", "tfrl", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO_ROOT, env=env)


def test_the_cli_trains_a_hybrid_policy_and_evaluate_refuses_an_env_without_one_of_its_parts(tmp_path):
    completed = _tfrl("train", "--agent=a2c", f"--env={ENV}", "--preset=none", "--hp=total_env_steps=256",
                      "--hp=num_envs=2", "--hp=eval_interval=0", "--hp=final_eval_episodes=2",
                      f"--run_dir={tmp_path / 'run'}")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert (tmp_path / "run" / "result.json").is_file()
    info = json.loads((tmp_path / "run" / "config.json").read_text())["env_info"]
    assert info["action_container"] == "Dict" and len(info["action_parts"]) == 2
    refused = _tfrl("evaluate", f"--run_dir={tmp_path / 'run'}", "--env=structure_envs:ToolOnly-v0", "--episodes=1")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
        "tfrl evaluate: error: the policy answers the action parts ['aim', 'tool'], but structure_envs:ToolOnly-v0 "
        "takes ['tool']: evaluate it on the env it was trained on")
