"""Problems with structure (issue 30): Dict observations, action masks, MultiDiscrete and MultiBinary actions, from
the env through replay, rollouts, the learners' math, checkpoints and resume, to the export and its serving."""

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
from tfrl.agents.actor_critic.heads import CategoricalHead, MultiCategoricalHead
from tfrl.agents.dqn.actor import EpsilonGreedyActor
from tfrl.agents.dqn.learning import td_targets
from tfrl.envs.observations import CheckedDictKeys, StructuredObservation, observation_spec, to_row
from tfrl.errors import UsageError
from tfrl.models import normalization
from tfrl.models.policy_inputs import MASK_KEY
from tfrl.run import launch

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests"))
import serving_helpers  # noqa: E402
import structure_envs  # noqa: E402  (registers the envs)

PPO = {"total_env_steps": 4096, "num_envs": 4, "rollout_length": 64, "batch_size": 64, "n_epochs": 2,
       "hidden_sizes": "32", "learning_rate": 3e-3, "eval_interval": 0, "final_eval_episodes": 4,
       "checkpoint_interval": 1024, "log_interval": 1024}
DQN = {"total_env_steps": 3000, "hidden_sizes": "32", "learning_starts": 300, "batch_size": 32,
       "target_update_period_env_steps": 200, "learning_rate": 1e-3, "eval_interval": 0, "final_eval_episodes": 4,
       "checkpoint_interval": 1000, "log_interval": 1000}
A2C = {"total_env_steps": 2048, "num_envs": 4, "hidden_sizes": "32", "eval_interval": 0, "final_eval_episodes": 4,
       "checkpoint_interval": 512, "log_interval": 512}
SAC = {"total_env_steps": 600, "hidden_sizes": "32", "learning_starts": 200, "batch_size": 32, "eval_interval": 0,
       "final_eval_episodes": 2, "checkpoint_interval": 300, "log_interval": 300, "normalize_observations": True}


# ---- Dict observations: what an env's entries become --------------------------------------------------------

def test_every_entry_kind_is_converted_into_one_field_by_hand():
    env = StructuredObservation(structure_envs.Everything())
    spec = observation_spec(env.observation_space)
    fields = {f.key: (f.shape, f.dtype) for f in spec.fields}
    assert fields == {"arm.grip": ((3,), "float32"), "arm.joints": ((3,), "float32"), "camera": ((6, 5, 3), "uint8"),
                      "count": ((1,), "float32"), "grid": ((4, 4, 1), "uint8"), "pair.0": ((5,), "float32"),
                      "pair.1": ((2,), "float32")}
    row = to_row(spec, env.reset()[0])
    np.testing.assert_array_equal(row["arm.grip"], [0, 0, 1])  # Discrete(3) value 2, one-hot
    np.testing.assert_array_equal(row["pair.0"], [0, 1, 0, 0, 1])  # MultiDiscrete([2, 3]) (1, 2): one-hots side by side
    np.testing.assert_array_equal(row["pair.1"], [1, 0])
    np.testing.assert_array_equal(row["arm.joints"], np.float32([0.5, -0.25, 1.0]))
    assert row["grid"][0, 0, 0] == 255 and row["grid"][0, 1, 0] == 0 and row["camera"][0, 0, 0] == 9
    assert spec.numpy_dtype.itemsize == spec.nbytes == 4 * (3 + 3 + 1 + 5 + 2) + 6 * 5 * 3 + 16  # images stay uint8


def test_a_dict_of_boxes_is_used_as_given_and_stored_in_the_fields_dtypes():
    class Plain(gym.Env):
        observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-2, 2, (2,), np.float64),
                                             "n": gym.spaces.Box(0, 9, (1,), np.int64)})
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return {"x": np.float64([0.1, -1.5]), "n": np.int64([7])}, {}

    plain = Plain()
    adapted = envs.adapted(plain, "Plain")  # no StructuredObservation: nothing to convert per step, only the keys
    assert type(adapted) is CheckedDictKeys and adapted.env is plain  # to check (a dict comparison)
    vector_env = envs.make_vector_env(envs.as_spec(Plain), 2, seed=0)
    try:
        batch = vector_env.first_obs
        assert batch.dtype == np.dtype([("n", np.float32, (1,)), ("x", np.float32, (2,))])
        np.testing.assert_array_equal(batch["x"], np.float32([[0.1, -1.5]] * 2))
        np.testing.assert_array_equal(batch["n"], [[7.0], [7.0]])
    finally:
        vector_env.close()


def test_a_dict_batch_is_stored_in_replay_and_checkpoints_as_it_is():
    from tfrl.replay import UniformReplay

    spec = observation_spec(StructuredObservation(structure_envs.Everything()).observation_space)
    replay = UniformReplay(8, spec.row_shape, seed=0, obs_dtype=spec.numpy_dtype)
    batch = spec.empty((3,))
    batch["camera"] = 200
    batch["count"] = np.arange(3)[:, None]
    replay.add(batch, np.zeros(3, np.int32), np.ones(3, np.float32), np.ones(3, np.float32), batch)
    arrays, state = replay.checkpoint_state()
    assert arrays["obs"].dtype == spec.numpy_dtype and arrays["obs"]["camera"].dtype == np.uint8
    restored = UniformReplay(8, spec.row_shape, seed=0, obs_dtype=spec.numpy_dtype)
    restored.restore_checkpoint_state(arrays, state)
    np.testing.assert_array_equal(restored.obs[:3]["count"][:, 0], [0, 1, 2])
    nan = batch.copy()
    nan["arm.joints"][1] = np.nan
    with pytest.raises(Exception, match="non-finite observation entering the replay"):
        replay.add(nan, np.zeros(3, np.int32), np.ones(3, np.float32), np.ones(3, np.float32), batch)


@pytest.mark.parametrize("agent, env, hp", [
    ("dqn", "custom_envs:DictCorridor-v0", DQN), ("ppo", "custom_envs:DictCorridor-v0", PPO),
    ("a2c", "custom_envs:DictCorridor-v0", A2C), ("sac", "structure_envs:DictPendulum-v0", SAC),
])
def test_every_agent_trains_resumes_and_exports_dict_observations_with_named_inputs(tmp_path, agent, env, hp):
    import custom_envs  # noqa: F401  (registers DictCorridor-v0)

    request = launch.TrainRequest(agent=agent, env=env, preset="none", hp=hp, run_dir=tmp_path / "run")
    metrics = tmp_path / "run" / "metrics.jsonl"
    # Stopped (as by Ctrl-C) once the first log record is written, so that the resume shows in metrics.jsonl.
    stopped = launch.execute(launch.prepare(request),
                             stop_requested=lambda: metrics.exists() and metrics.stat().st_size > 0)
    assert stopped.record["kind"] == "stopped"
    run = tfrl.train(agent, env, preset="none", hp=hp, run_dir=tmp_path / "run", verbose=0)  # resumes
    assert run.complete and "resume" in (tmp_path / "run" / "metrics.jsonl").read_text()
    signature = tf.saved_model.load(str(run.saved_model)).signatures["serving_default"]
    inputs = signature.structured_input_signature[1]
    keys = {"position"} if "Corridor" in env else {"angle", "speed"}
    assert set(inputs) == keys
    policy = tfrl.load_policy(run.saved_model)
    if "Corridor" in env:
        one = {"position": np.eye(6, dtype=np.float32)[0]}
        batch = {"position": np.eye(6, dtype=np.float32)}
    else:
        one = {"angle": np.float32([1, 0]), "speed": np.float32([0.5])}
        batch = {"angle": np.float32([[1, 0]] * 3), "speed": np.float32([[0.5]] * 3)}
    assert np.shape(policy(one)) == np.shape(policy(batch)[0]) and len(policy(batch)) == len(next(iter(batch.values())))
    np.testing.assert_allclose(tfrl.load_policy(run.run_dir, checkpoint="last").outputs(batch)["action"],
                               policy.outputs(batch)["action"], rtol=1e-5)
    with pytest.raises(UsageError, match="missing"):
        policy({})


def test_an_image_field_gets_a_cnn_beside_a_vector_field_and_stays_uint8(tmp_path):
    hp = {**PPO, "total_env_steps": 1024, "torso": "minatar_cnn"}
    run = tfrl.train("ppo", "structure_envs:CatchWithClock-v0", preset="none", hp=hp, run_dir=tmp_path / "run",
                     verbose=0)
    loaded = tfrl.load_policy(run.run_dir)
    inputs = tf.saved_model.load(str(run.saved_model)).signatures["serving_default"].structured_input_signature[1]
    assert inputs["board"].dtype == tf.uint8 and inputs["clock"].dtype == tf.float32
    from tfrl.run import runs

    network = runs.load_policy(run.run_dir).policy.model
    assert [layer.name for layer in network.layers if "conv" in layer.name] == ["board_conv_0"]
    board = np.zeros((10, 5, 1), np.uint8)
    assert loaded({"board": board, "clock": np.zeros(1, np.float32)}) in (0, 1, 2)
    with pytest.raises(UsageError, match="takes uint8 field 'board'"):
        loaded({"board": board.astype(np.float32), "clock": np.zeros(1, np.float32)})


def test_dict_normalization_keeps_statistics_per_vector_field():
    spec = observation_spec(gym.spaces.Dict({"a": gym.spaces.Box(-9, 9, (2,)), "b": gym.spaces.Box(-9, 9, (1,)),
                                             MASK_KEY: gym.spaces.Box(0, 1, (3,), np.int8)}))
    normalizer = normalization.make(type("C", (), {"normalize_observations": True, "observation_clip": 10.0}),
                                    spec)
    batch = spec.empty((4,))
    batch["a"] = [[1, 10], [3, 10], [5, 10], [7, 10]]
    batch["b"] = [[2], [2], [2], [2]]
    batch[MASK_KEY] = 1
    out = normalizer.observe(batch)
    # "a": means 4 and 10, variances 5 and 0 (with SB3's 1e-4 prior count): (1 - 4) / sqrt(5) = -1.342 for the first.
    np.testing.assert_allclose(out["a"][:, 0], (np.array([1, 3, 5, 7]) - 4) / np.sqrt(5 * 4 / 4.0001 + 1e-8),
                               rtol=1e-3)
    assert set(normalizer.fields) == {"a", "b"} and (out[MASK_KEY] == 1).all()  # the mask is not normalized
    layer = normalizer.layer
    normalizer.sync()
    tensors = {key: tf.constant(batch[key]) for key in ("a", "b", MASK_KEY)}
    np.testing.assert_allclose(layer(tensors)["a"].numpy(), out["a"], rtol=1e-5, atol=1e-5)  # float32 in TF


# ---- action masks: the math by hand ----------------------------------------------------------------------------

def test_the_masked_bootstrap_target_by_hand():
    # Q_target(s') = [5, 9, 1], Q_online(s') = [4, 0, 8]; legal: actions 0 and 2.
    # Plain max: 9 (action 1, illegal); masked max: 5. Double DQN: a* = argmax_legal Q_online = 2 -> Q_target 1.
    # A state without a legal action (a last observation) bootstraps from 0: target = r.
    r, discount = tf.constant([1.0, 1.0, 1.0]), tf.constant([0.5, 0.5, 0.5])
    q_target = tf.constant([[5.0, 9.0, 1.0]] * 3)
    q_online = tf.constant([[4.0, 0.0, 8.0]] * 3)
    legal = tf.constant([[True, False, True], [True, False, True], [False, False, False]])
    np.testing.assert_allclose(td_targets(r, discount, q_target, None, legal).numpy(), [3.5, 3.5, 1.0])
    np.testing.assert_allclose(td_targets(r, discount, q_target, q_online, legal).numpy(), [1.5, 1.5, 1.0])
    np.testing.assert_allclose(td_targets(r, discount, q_target).numpy(), [5.5, 5.5, 5.5])


def test_masked_log_probs_and_entropy_by_hand():
    # logits [0, ln 2, ln 3], action 1 legal with 0 (2 illegal): pi = [1/3, 2/3, 0].
    # log pi(1) = ln(2/3) = -0.4055; H = -(1/3 ln 1/3 + 2/3 ln 2/3) = 0.6365.
    logits = tf.constant([[0.0, np.log(2.0), np.log(3.0)]])
    legal = tf.constant([[True, True, False]])
    head = CategoricalHead(3)
    np.testing.assert_allclose(head.log_prob(logits, tf.constant([1]), legal).numpy(), [np.log(2 / 3)], rtol=1e-6)
    np.testing.assert_allclose(head.entropy(logits, legal).numpy(), [0.636514], rtol=1e-5)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        entropy = head.entropy(logits, legal)
    assert np.isfinite(tape.gradient(entropy, logits).numpy()).all()
    # MultiDiscrete [2, 3]: log pi = log pi_0 + log pi_1; masked per dimension.
    multi = MultiCategoricalHead([2, 3])
    params = tf.constant([[0.0, 0.0, 0.0, np.log(2.0), np.log(3.0)]])
    mask = tf.constant([[True, True, True, True, False]])
    log_prob = multi.log_prob(params, tf.constant([[0, 1]]), mask).numpy()
    np.testing.assert_allclose(log_prob, [np.log(0.5) + np.log(2 / 3)], rtol=1e-6)
    np.testing.assert_allclose(multi.entropy(params, mask).numpy(), [np.log(2) + 0.636514], rtol=1e-5)
    np.testing.assert_allclose(multi.log_prob_numpy(params.numpy(), np.array([[1, 2]])),
                               [np.log(0.5) + np.log(3 / 6)], rtol=1e-6)  # unmasked: 3 / (1 + 2 + 3)


def test_exploration_and_sampling_never_pick_an_illegal_action():
    rng = np.random.default_rng(0)
    spec = observation_spec(gym.spaces.Dict({"x": gym.spaces.Box(0, 1, (2,)),
                                             MASK_KEY: gym.spaces.Box(0, 1, (7,), np.int8)}))
    batch = spec.empty((500,))
    mask = rng.random((500, 7)) < 0.3
    mask[np.arange(500), rng.integers(0, 7, 500)] = True  # at least one legal action
    batch[MASK_KEY] = mask
    actor = EpsilonGreedyActor(lambda obs: rng.normal(size=(len(obs), 7)), 7, seed=1)
    for epsilon in (0.0, 0.5, 1.0):
        actions = actor.act(batch, epsilon)
        assert mask[np.arange(500), actions].all()
    from tfrl.agents.actor_critic.heads import masked_logits_numpy

    head = CategoricalHead(7)
    sampled = head.sample(rng, masked_logits_numpy(rng.normal(size=(500, 7)).astype(np.float32), mask))
    assert mask[np.arange(500), sampled].all()


# ---- action masks: training, export, serving ------------------------------------------------------------------

@pytest.fixture(scope="module")
def masked_exports(tmp_path_factory):
    """A DQN and a PPO export of tfrl/MaskedPick-v0 (10 actions, 1 to 3 legal each step)."""
    base = tmp_path_factory.mktemp("masked")
    dqn = tfrl.train("dqn", "tfrl/MaskedPick-v0", preset="none", run_dir=base / "dqn", verbose=0,
                     hp={**DQN, "total_env_steps": 2000})
    ppo = tfrl.train("ppo", "tfrl/MaskedPick-v0", preset="none", run_dir=base / "ppo", verbose=0, hp=PPO)
    return {"dqn": dqn, "ppo": ppo}


@pytest.mark.parametrize("agent", ["dqn", "ppo"])
def test_the_masked_export_never_returns_an_illegal_action_for_1000_random_masks(masked_exports, agent):
    rng = np.random.default_rng(5)
    mask = (rng.random((1000, 10)) < 0.2).astype(np.uint8)
    mask[np.arange(1000), rng.integers(0, 10, 1000)] = 1
    state = rng.random((1000, 10)).astype(np.float32)
    policy = tfrl.load_policy(masked_exports[agent].saved_model)
    actions = policy({"state": state, MASK_KEY: mask})
    assert mask[np.arange(1000), actions].all()
    # Through tfrl-serve too, in TF Serving's row format, and without the mask: 400 naming it.
    from tfrl.model_server.options import ServerOptions

    options = ServerOptions(model_name="pick", model_base_path=masked_exports[agent].saved_model.parent)
    with serving_helpers.running_server(options) as (port, _):
        client = serving_helpers.Client(port)
        rows = [{"state": s.tolist(), MASK_KEY: m.tolist()} for s, m in zip(state, mask)]
        status, answer = client.predict("pick", {"instances": rows})
        assert status == 200, answer
        served = np.array([p["action"] for p in answer["predictions"]])
        assert mask[np.arange(1000), served].all() and (served == actions).all()
        status, answer = client.predict("pick", {"inputs": {"state": state[:2].tolist()}})
        assert status == 400 and MASK_KEY in json.dumps(answer), answer
        status, metadata = client.get("/v1/models/pick/metadata")
        inputs = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
        assert set(inputs) == {"state", MASK_KEY}
        client.close()


@pytest.mark.parametrize("agent", ["dqn", "ppo"])
def test_a_mask_that_allows_nothing_or_holds_other_values_than_0_and_1_gets_no_action(masked_exports, agent):
    state = np.zeros((2, 10), np.float32)
    legal = np.zeros((2, 10), np.uint8)
    legal[:, 3] = 1
    none_legal = legal.copy()
    none_legal[1] = 0
    run = masked_exports[agent]
    for policy in (tfrl.load_policy(run.saved_model), tfrl.load_policy(run.run_dir)):
        assert (policy({"state": state, MASK_KEY: legal}) == 3).all()
        with pytest.raises(UsageError, match="action_mask' of row 1 allows no action: there is no right answer"):
            policy({"state": state, MASK_KEY: none_legal})
        with pytest.raises(UsageError, match="allows no action"):
            policy({"state": state[0], MASK_KEY: np.zeros(10, np.uint8)})  # one observation too
        for value in (2, 0.5, -1, np.nan):
            bad = legal.astype(np.float64)
            bad[0, 5] = value
            with pytest.raises(UsageError, match="must hold only 0 and 1"):
                policy({"state": state, MASK_KEY: bad})
        assert (policy({"state": state, MASK_KEY: legal.astype(bool)}) == 3).all()  # booleans are 0 and 1
    # The SavedModel itself (what TF Serving runs) takes MaskedPick's own int8 masks (it took uint8 only), and
    # answers with its flag: the action of row 1 means nothing.
    signature = tf.saved_model.load(str(run.saved_model)).signatures["serving_default"]
    assert signature.structured_input_signature[1]["action_mask"].dtype == tf.int8
    raw = signature(state=tf.constant(state), action_mask=tf.constant(none_legal.astype(np.int8)))
    assert raw["no_legal_action"].numpy().tolist() == [False, True] and int(raw["action"][0]) == 3
    # tfrl-serve: 400, for no legal action and for a 2.
    from tfrl.model_server.options import ServerOptions

    options = ServerOptions(model_name="pick", model_base_path=run.saved_model.parent)
    with serving_helpers.running_server(options) as (port, _):
        client = serving_helpers.Client(port)
        for mask, message in ((none_legal, "the mask of row 1 allows no action"), (legal * 2, "only 0 and 1")):
            status, answer = client.predict("pick", {"inputs": {"state": state.tolist(), MASK_KEY: mask.tolist()}})
            assert status == 400 and message in answer["error"], answer
        status, answer = client.predict("pick", {"inputs": {"state": state.tolist(), MASK_KEY: legal.tolist()}})
        assert status == 200 and [row for row in answer["outputs"]["action"]] == [3, 3], answer
        client.close()


def test_greedy_scores_flag_a_row_where_one_part_of_a_multi_part_action_has_no_legal_value():
    from tfrl.models import networks

    mask = tf.constant([[1, 0, 0, 1, 1], [0, 0, 0, 1, 0], [1, 1, 1, 0, 0]], tf.uint8)  # parts of 3 and 2 values
    scores, flags = networks.greedy_scores({MASK_KEY: mask}, tf.zeros([3, 5]), part_sizes=(3, 2))
    assert flags["no_legal_action"].numpy().tolist() == [False, True, True]
    assert scores.numpy()[0].tolist() == [0.0, np.finfo(np.float32).min, np.finfo(np.float32).min, 0.0, 0.0]
    assert networks.greedy_scores({"x": mask}, tf.zeros([3, 5]))[1] == {}  # no mask: no flag


def test_masking_lets_ppo_solve_the_masked_env_quickly(masked_exports):
    # MaskedPick's "state" shows every action's payoff, decoys on illegal ones included: with the mask the policy
    # reads the reward off; 4096 env steps are enough to score well above the random legal policy's 12.
    assert masked_exports["ppo"].result["return_mean"] >= 16


def test_an_action_masks_method_is_used_like_a_mask_field(tmp_path):
    run = tfrl.train("ppo", "structure_envs:MethodMaskedCorridor-v0", preset="none", run_dir=tmp_path / "run",
                     verbose=0, hp=PPO)  # the env raises on an illegal action: a run that ends never took one
    assert run.complete and run.result["return_mean"] > 0.5
    assert tfrl.load_policy(run.saved_model).observations.mask is not None


def test_an_action_masks_method_env_s_policy_takes_the_env_s_own_observation_beside_the_mask(tmp_path):
    run = tfrl.train("ppo", "structure_envs:MethodMaskedCorridor-v0", env_kwargs={"integer_obs": True},
                     preset="none", run_dir=tmp_path / "run", verbose=0, hp=PPO)
    assert run.complete and run.result["return_mean"] > 0.5
    metadata = json.loads((run.saved_model / "assets.extra" / "tfrl_metadata.json").read_text())
    assert metadata["observation"]["env_space"] == {"type": "Dict", "spaces": {
        "observation": {"type": "Discrete", "n": 6, "start": 0}, MASK_KEY: {"type": "Box"}}}
    masks = np.tile(np.uint8([1, 1, 0]), (6, 1))  # left or right
    for policy in (tfrl.load_policy(run.saved_model), tfrl.load_policy(run.run_dir)):
        by_cell = policy({"observation": np.arange(6), MASK_KEY: masks})  # the env's integers
        np.testing.assert_array_equal(by_cell, policy({"observation": np.eye(6, dtype=np.float32), MASK_KEY: masks}))
        assert int(policy({"observation": 2, MASK_KEY: [1, 0, 0]})) == 0  # the only legal action
        with pytest.raises(UsageError, match="takes integers from 0 to 5, got 6"):
            policy({"observation": 6, MASK_KEY: [1, 1, 0]})


def _tfrl(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "tests"))
    env.pop("KERAS_BACKEND", None)
    return subprocess.run([sys.executable, "-m", "tfrl", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("env, kwargs, code, message", [
    ("structure_envs:MethodMaskedCorridor-v0", ["--env_kwargs=no_legal_at=3"], 1,
     "the env failed at env step 3 (env 0's action_mask allows no action)"),
    ("structure_envs:ChangingKeys-v0", [], 1,
     "the env failed at env step 4 (ValueError: its observation has the keys ['b']"),
    ("structure_envs:ChangingKeys-v0", ["--env_kwargs=change=shape"], 1,
     "the env failed at env step 4 (ValueError: Output array is the wrong shape)"),  # gymnasium's words
    ("structure_envs:MethodMaskedCorridor-v0", ["--env_kwargs=bad_mask_at=2"], 1,
     "the env failed at env step 1 (ValueError: its action_mask has 2 entries, not one per action (3))"),
    ("structure_envs:MethodMaskedCorridor-v0", ["--env_kwargs=bad_mask_at=2", "--env_kwargs=bad_mask=probabilities"], 1,
     "the env failed at env step 1 (ValueError: its action_mask holds values other than 0 and 1 (dtype float32"),
])
def test_no_legal_action_changing_keys_or_a_malformed_mask_stop_with_one_line(tmp_path, env, kwargs, code, message):
    completed = _tfrl("train", "--agent=ppo", f"--env={env}", *kwargs, "--preset=none", "--hp=total_env_steps=256",
                      "--hp=num_envs=1", "--hp=rollout_length=64", "--hp=batch_size=64",
                      f"--run_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert completed.returncode == code and "Traceback" not in completed.stderr, completed.stderr[-3000:]
    assert message in completed.stderr


def test_masks_are_refused_with_box_actions_and_multidiscrete_by_dqn(tmp_path):
    class BoxWithMask(gym.Env):
        observation_space = gym.spaces.Dict({"x": gym.spaces.Box(0, 1, (2,)),
                                             MASK_KEY: gym.spaces.Box(0, 1, (2,), np.int8)})
        action_space = gym.spaces.Box(-1, 1, (2,))

    with pytest.raises(UsageError, match="an 'action_mask' observation but Box actions"):
        envs.make_vector_env(envs.as_spec(BoxWithMask), 1, seed=0)
    with pytest.raises(UsageError, match="--agent=dqn acts in discrete action spaces; tfrl/MultiKnob-v0 has "
                                         r"MultiDiscrete actions \(a Q-function over every combination"):
        tfrl.train("dqn", "tfrl/MultiKnob-v0", run_dir=tmp_path / "x", verbose=0)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("agent, env", [("ppo", "tfrl/MultiKnob-v0"), ("a2c", "tfrl/Switches-v0")])
def test_multidiscrete_and_multibinary_actions_train_and_export_an_int_array(tmp_path, agent, env):
    hp = {"ppo": PPO, "a2c": A2C}[agent]
    run = tfrl.train(agent, env, preset="none", hp={**hp, "checkpoint_interval": 0}, run_dir=tmp_path / "run",
                     verbose=0)
    policy = tfrl.load_policy(run.saved_model)
    dims = 3 if "Knob" in env else 6
    actions = policy(np.zeros((5, policy.obs_shape[0]), np.float32))
    assert actions.shape == (5, dims) and actions.dtype == np.int64
    assert run.result["return_mean"] > {"ppo": 8, "a2c": 11}[agent]  # random play: 5.3 and 10
    metadata = json.loads((run.saved_model / "assets.extra" / "tfrl_metadata.json").read_text())
    assert metadata["action_space"]["type"] == ("MultiDiscrete" if "Knob" in env else "MultiBinary")
