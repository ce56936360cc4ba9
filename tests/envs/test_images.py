"""Image observations: the CNN torsos, uint8 from the env to the export, the frame-stack replay, and learning Catch."""

import gymnasium as gym
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfrl
from tfrl import agents, config as config_lib, envs
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.networks import q_network
from tfrl.config import ConfigError
from tfrl.envs import VectorStep
from tfrl.errors import UsageError
from tfrl.models import networks, numpy_networks
from tfrl.replay import NStepBuilder, UniformReplay
from tfrl.replay.frames import FrameStackReplay
from tfrl.replay.prioritized import PrioritizedReplay


# ---- torsos ------------------------------------------------------------------------------------------------

def test_auto_torso_is_a_cnn_for_images_only_and_bad_choices_get_one_line():
    assert config_lib.resolved_torso("auto", (84, 84, 4), "uint8") == "nature_cnn"
    assert config_lib.resolved_torso("auto", (10, 10, 4), "uint8") == "minatar_cnn"
    assert config_lib.resolved_torso("auto", (8,), "float32") == "mlp"
    assert config_lib.resolved_torso("auto", (84, 84, 4), "float32") == "mlp"  # not uint8: not an image
    assert config_lib.resolved_torso("mlp", (10, 5, 1), "uint8") == "mlp"
    with pytest.raises(ConfigError, match=r"torso=nature_cnn takes HWC uint8 image observations, got float32 \(8,\)"):
        config_lib.resolved_torso("nature_cnn", (8,), "float32")
    with pytest.raises(ConfigError, match="torso=nature_cnn needs images of at least 36x36, got .*use minatar_cnn"):
        config_lib.resolved_torso("nature_cnn", (10, 5, 1), "uint8")
    with pytest.raises(ValueError, match="torso must be one of auto, mlp, nature_cnn, minatar_cnn, got 'resnet'"):
        DQNConfig(torso="resnet")


def test_nature_cnn_layers_and_the_uint8_input_scaled_inside():
    model = q_network((84, 84, 4), 6, (512,), obs_dtype="uint8", torso="nature_cnn")
    assert model.inputs[0].dtype == "uint8"
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert [(c.filters, c.kernel_size, c.strides) for c in convs] == [(32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)),
                                                                      (64, (3, 3), (1, 1))]
    assert model.get_layer("torso_0").kernel.shape == (7 * 7 * 64, 512)
    # The same weights fed float frames / 255 through the layers after the scaling give the same Q-values.
    frames = np.random.default_rng(0).integers(0, 256, (3, 84, 84, 4), dtype=np.uint8)
    x = tf.constant(frames.astype(np.float32) / 255.0)
    for layer in model.layers[2:]:  # after the input and the scaling
        x = layer(x)
    np.testing.assert_allclose(model(frames).numpy(), x.numpy(), rtol=1e-5, atol=1e-6)


def test_image_actors_call_the_live_network_and_mlp_actors_keep_their_numpy_mirror():
    cnn = q_network((10, 5, 1), 3, (16,), obs_dtype="uint8", torso="minatar_cnn")
    mlp = q_network((10, 5, 1), 3, (16,), obs_dtype="uint8", torso="mlp")
    frames = np.random.default_rng(1).integers(0, 256, (4, 10, 5, 1), dtype=np.uint8)
    live = networks.acting_network(cnn, numpy_networks.NumpyQNetwork)
    assert isinstance(live, networks.GraphForward) and networks.acting_variables(cnn) == []
    np.testing.assert_allclose(live(frames), cnn(frames).numpy(), rtol=1e-6)
    mirror = networks.acting_network(mlp, numpy_networks.NumpyQNetwork)
    assert isinstance(mirror, numpy_networks.NumpyQNetwork)  # scales uint8 by 1/255 as the network does
    np.testing.assert_allclose(mirror(frames), mlp(frames).numpy(), rtol=1e-5, atol=1e-6)


def test_a_cnn_on_a_cpu_is_advised_off_xla_and_onto_bfloat16_where_the_cpu_has_it():
    from tfrl.hardware.precision import cnn_precision_advice
    from tfrl.hardware.runtime import Runtime, RuntimeOptions

    def on(device, **options):
        return Runtime(RuntimeOptions(**options), device)

    assert cnn_precision_advice(on("/device:CPU:0", xla=False), ()) == []  # float32 without XLA: already best
    [xla] = cnn_precision_advice(on("/device:CPU:0", xla=True, mixed_precision="mixed_bfloat16"), ("avx512_bf16",))
    assert xla.startswith("--xla with a CNN on a CPU: XLA's CPU convolutions make the train step many times slower")
    [bf16] = cnn_precision_advice(on("/device:CPU:0", xla=False), ("amx_bf16", "avx512_bf16"))
    assert bf16.startswith("this CPU has bfloat16 instructions: --mixed_precision=mixed_bfloat16 trains a CNN faster")
    assert cnn_precision_advice(on("/device:GPU:0", xla=True), ("avx512_bf16",)) == []


# ---- environments ----------------------------------------------------------------------------------------

def test_catch_observations_rewards_and_bad_actions():
    env = gym.make("tfrl/Catch-v0")
    obs, _ = env.reset(seed=3)
    assert obs.shape == (10, 5, 1) and obs.dtype == np.uint8
    column = int(np.flatnonzero(obs[0, :, 0])[0])
    assert obs[9, 2, 0] == 255 and obs.sum() == 2 * 255  # the ball at the top, the paddle in the middle
    total, steps, done = 0.0, 0, False
    while not done:  # follow the ball: caught
        paddle = int(np.flatnonzero(obs[9, :, 0])[-1]) if obs[9].sum() else 2
        obs, reward, done, truncated, _ = env.step(int(np.sign(column - paddle)) + 1)
        total, steps = total + reward, steps + 1
    assert (total, steps) == (1.0, 9)
    env.reset(seed=3)
    for _ in range(9):  # move away: missed
        _, reward, done, _, _ = env.step(0 if column > 1 else 2)
    assert done and reward == -1.0
    with pytest.raises(ValueError, match="Catch takes actions 0, 1, 2; got 3"):
        env.step(3)


def test_vector_env_keeps_uint8_and_records_the_dtype():
    env = envs.make_vector_env("tfrl/Catch-v0", 2, seed=0)
    try:
        info = envs.env_info(env, "tfrl/Catch-v0")
        assert env.first_obs.dtype == np.uint8 and info.obs_dtype == "uint8"
        stepper = envs.VectorStepper(env, on_episode=lambda *a: None)
        step = stepper.step(np.ones(2, np.int64))
        assert stepper.obs.dtype == np.uint8 and step.final_obs().dtype == np.uint8
        assert info.to_dict() == {"env_id": "tfrl/Catch-v0", "obs_shape": [10, 5, 1], "num_actions": 3,
                                  "obs_dtype": "uint8"}
        assert envs.EnvInfo.from_dict(info.to_dict()) == info
    finally:
        env.close()


def test_boolean_observations_become_uint8_images():
    class Grid(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (6, 6, 2), bool)  # as MinAtar's
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            grid = np.zeros((6, 6, 2), bool)
            grid[1, 2, 0] = True
            return grid, {}

        def step(self, action):
            return self.reset()[0], 0.0, True, False, {}

    env = envs.as_spec(Grid).make()
    obs, _ = env.reset()
    assert env.observation_space == gym.spaces.Box(0, 255, (6, 6, 2), np.uint8)
    assert obs.dtype == np.uint8 and obs[1, 2, 0] == 255 and obs.sum() == 255


def test_a_policy_takes_boolean_grids_as_the_env_gives_them():
    # tfrl's networks see a boolean grid as uint8 0 and 255 (the test above); a policy object given the env's own
    # boolean observations converts them the same way, and still refuses a float image.
    from tfrl.models.policy_inputs import Field, field_batch

    grid = np.zeros((6, 6, 2), bool)
    grid[1, 2, 0] = True
    batch, single = field_batch(Field("observation", (6, 6, 2), "uint8"), grid, "observations", "policy")
    assert single and batch.dtype == np.uint8 and batch.shape == (1, 6, 6, 2)
    assert batch[0, 1, 2, 0] == 255 and batch.sum() == 255
    with pytest.raises(UsageError, match="takes uint8 observations \\(images\\), got float32"):
        field_batch(Field("observation", (6, 6, 2), "uint8"), grid.astype(np.float32), "observations", "policy")
    flat, _ = field_batch(Field("observation", (6, 6), "uint8"), grid[..., 0], "observations", "policy")  # 2-D too
    assert flat[0, 1, 2] == 255 and flat.sum() == 255
    mask, _ = field_batch(Field("action_mask", (2,), "uint8"), np.array([True, False]), "field", "policy")
    assert mask.tolist() == [[1, 0]]  # a mask stays 0/1


def test_sac_and_normalization_refuse_images_with_one_line():
    from tfrl import agents
    info = envs.EnvInfo("tfrl/Catch-v0", (10, 5, 1), 3, obs_dtype="uint8")
    with pytest.raises(UsageError, match=r"--agent=sac takes vector observations; tfrl/Catch-v0 has uint8 images"):
        agents.get("sac").check_env(info)
    ppo_config = agents.get("ppo").config_cls(normalize_observations=True)
    with pytest.raises(UsageError, match="normalize_observations: uint8 .* set normalize_observations=false"):
        agents.get("ppo").check_env(info, ppo_config)
    with pytest.raises(UsageError, match="train_in_background: the minatar_cnn torso's actor calls the live network"):
        agents.get("dqn").check_env(info, DQNConfig(train_in_background=True))
    agents.get("dqn").check_env(info, DQNConfig(train_in_background=True, torso="mlp"))  # a NumPy mirror: fine


# ---- the frame-stack replay ------------------------------------------------------------------------------

class _Frames(gym.Env):
    """Random 6x7 frames, episodes of random lengths ending in termination or truncation."""

    observation_space = gym.spaces.Box(0, 255, (6, 7), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t, self._length = 0, int(self.np_random.integers(1, 12))
        return self.np_random.integers(0, 256, (6, 7), dtype=np.uint8), {}

    def step(self, action):
        self._t += 1
        end = self._t >= self._length
        terminated = end and self.np_random.random() < 0.5
        frame = self.np_random.integers(0, 256, (6, 7), dtype=np.uint8)
        return frame, float(self.np_random.normal()), terminated, end and not terminated, {}


def _stacked_frames():
    env = gym.wrappers.FrameStackObservation(_Frames(), 4)  # pads with the reset frame, as the Atari envs
    space = gym.spaces.Box(0, 255, (6, 7, 4), np.uint8)
    return gym.wrappers.TransformObservation(env, lambda obs: np.moveaxis(np.asarray(obs), 0, -1), space)


def _fill(capacity, steps, n_step, seed=0, prioritized=False):
    """A naive replay of whole stacks and a FrameStackReplay, fed the same vector steps."""
    num_envs = 3
    vector = gym.vector.SyncVectorEnv([_stacked_frames] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    naive = UniformReplay(capacity, (6, 7, 4), seed=seed, obs_dtype="uint8")
    refs = (PrioritizedReplay(capacity, (), seed, 0.6, 1e-6, obs_dtype=np.int64) if prioritized
            else UniformReplay(capacity, (), seed=seed, obs_dtype=np.int64))
    replay = FrameStackReplay(refs, (6, 7), 4, num_envs, n_step)
    naive_nstep, ref_nstep = NStepBuilder(n_step, 0.9, num_envs), NStepBuilder(n_step, 0.9, num_envs)
    obs, _ = vector.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        action = rng.integers(0, 3, num_envs)
        next_obs, reward, terminated, truncated, infos = vector.step(action)
        step = VectorStep(np.array(obs), action, reward, terminated, truncated, np.array(next_obs), infos)
        full = naive_nstep.step(step.obs, action, reward, terminated, truncated, step.final_obs())
        obs_refs, next_refs = replay.observe(step)
        by_ref = ref_nstep.step(obs_refs, action, reward, terminated, truncated, next_refs)
        assert (full is None) == (by_ref is None)
        if full is not None:
            naive.add(*full)
            replay.add(*by_ref)
        obs = next_obs
    vector.close()
    return naive, replay


@pytest.mark.parametrize("n_step", [1, 3])
def test_frame_replay_rebuilds_the_same_stacks_as_a_naive_buffer(n_step):
    naive, replay = _fill(capacity=500, steps=400, n_step=n_step)  # wraps: 3 envs x 400 steps > 500
    assert replay.size == naive.size == 500 and naive.cursor == replay.transitions.cursor
    chain, kept = replay.frames.stack_refs(replay.transitions.obs)
    next_chain, next_kept = replay.frames.stack_refs(replay.transitions.next_obs)
    valid = kept & next_kept
    # Every transition whose frames are all still stored rebuilds exactly. Only old ones lost a frame: the store
    # keeps 2 % + a few frames more than the capacity, and each episode start adds one (here episodes are short).
    assert valid.sum() >= 425  # episodes of 6 steps on average here: 1 frame in 7 starts one
    age = (naive.cursor - 1 - np.arange(500)) % 500  # 0: the newest transition
    assert age[~valid].min() >= 400
    np.testing.assert_array_equal(replay.frames.stacks(chain[valid]), naive.obs[valid])
    np.testing.assert_array_equal(replay.frames.stacks(next_chain[valid]), naive.next_obs[valid])
    np.testing.assert_array_equal(replay.transitions.reward, naive.reward)
    np.testing.assert_array_equal(replay.transitions.discount, naive.discount)
    # A sample is the naive buffer's rows at the sampled slots, lost rows drawn again.
    batch = replay.sample(64, 5)
    assert batch["obs"].shape == (5, 64, 6, 7, 4) and batch["obs"].dtype == np.uint8
    for k in range(5):
        for row in range(64):
            slot = np.flatnonzero((naive.reward == batch["reward"][k, row]) & (naive.action == batch["action"][k, row]))
            assert any(np.array_equal(naive.obs[s], batch["obs"][k, row])
                       and np.array_equal(naive.next_obs[s], batch["next_obs"][k, row]) for s in slot)


def test_frame_replay_bytes_per_transition_and_checkpoint_round_trip():
    naive, replay = _fill(capacity=300, steps=60, n_step=1, prioritized=True)
    arrays, state = replay.checkpoint_state()
    restored = FrameStackReplay(PrioritizedReplay(300, (), 5, 0.6, 1e-6, obs_dtype=np.int64), (6, 7), 4, 3, 1)
    restored.restore_checkpoint_state(arrays, state)
    np.testing.assert_array_equal(restored.sample(32, 2, beta=0.5)["obs"], replay.sample(32, 2, beta=0.5)["obs"])
    # Memory: the frame store and the refs, against two whole stacks per transition.
    capacity = 100_000
    store = FrameStackReplay(UniformReplay(capacity, (), seed=0, obs_dtype=np.int64), (84, 84), 4, 8, 3)
    refs = store.transitions
    allocated = (store.frames.frames.nbytes + store.frames.prev.nbytes + refs.obs.nbytes + refs.next_obs.nbytes
                 + refs.action.nbytes + refs.reward.nbytes + refs.discount.nbytes)
    per_transition = allocated / capacity
    assert 84 * 84 < per_transition < 1.03 * (84 * 84 + 8) + 28  # about one frame: 7.2 GB for 1M transitions
    assert per_transition == pytest.approx(
        agents.get("dqn").spec.estimate_memory(DQNConfig(replay_capacity=capacity), envs.EnvInfo(
            "Pong", (84, 84, 4), 6, obs_dtype="uint8", frame_stack=4), "sync")["replay"] / capacity, rel=0.01)
    assert 2 * 84 * 84 * 4 / per_transition > 7.5  # a naive uint8 buffer needs 8x as much


# ---- learning from pixels ----------------------------------------------------------------------------------

@pytest.mark.parametrize("agent, hp", [
    ("dqn", {"total_env_steps": 6000, "learning_starts": 1000, "replay_capacity": 10_000, "batch_size": 32,
             "hidden_sizes": (64,), "learning_rate": 1e-3, "target_update_period_env_steps": 500,
             "epsilon_decay_fraction": 0.3, "eval_interval": 0}),
    ("ppo", {"total_env_steps": 16_384, "num_envs": 8, "rollout_length": 32, "batch_size": 64,
             "hidden_sizes": (64,), "learning_rate": 1e-3, "eval_interval": 0}),
])
@pytest.mark.slow
def test_dqn_and_ppo_learn_catch_from_pixels(tmp_path, agent, hp):
    # A uniformly random policy scores about -0.6 (it catches 1 ball in 5 from the middle column, or so).
    run = tfrl.train(agent, "tfrl/Catch-v0", hp=hp, preset="none", run_dir=tmp_path / "run", seed=0)
    assert run.complete and run.result["return_mean"] >= 0.9, run.result
    policy = run.policy()
    assert policy.obs_dtype == np.uint8
    with pytest.raises(UsageError, match="takes uint8 observations \\(images\\), got float32"):
        policy(np.zeros((10, 5, 1), np.float32))
    served = tfrl.load_policy(run.saved_model)
    frames = envs.make_vector_env("tfrl/Catch-v0", 8, seed=7).first_obs
    np.testing.assert_array_equal(served(frames), policy(frames))
