"""Tests for tfrl.models.networks: the NumPy mirror must compute exactly what the Keras model computes."""

import keras
import numpy as np
import pytest

from tfrl.agents.actor_critic.feedforward import actor_critic_network
from tfrl.agents.dqn.networks import q_network
from tfrl.agents.off_policy.networks import q_critic
from tfrl.agents.sac.networks import squashed_gaussian_actor
from tfrl.agents.td3.networks import deterministic_actor
from tfrl.models import numpy_networks


def _random_weights(model, rng):
    return [rng.normal(0.0, 0.5, size=v.shape).astype(np.float32) for v in model.trainable_variables]


@pytest.mark.parametrize("obs_shape, hidden_sizes, dueling", [
    ((4,), (8, 8), False),
    ((4,), (8, 8), True),
    ((3, 2), (5,), False),  # 2-D observations go through Flatten
    ((6,), (4,) * 11, True),  # 11 torso layers: torso_10 must come after torso_9, not after torso_1
])
def test_numpy_mlp_matches_keras_model(obs_shape, hidden_sizes, dueling):
    model = q_network(obs_shape, 3, hidden_sizes, dueling)
    mirror = numpy_networks.NumpyQNetwork(model)
    obs = np.random.default_rng(0).normal(size=(16, *obs_shape)).astype(np.float32)

    expected = np.asarray(model(obs))
    actual = mirror(obs)

    assert expected.shape == (16, 3)
    assert actual.dtype == np.float32
    np.testing.assert_allclose(actual, expected, atol=1e-5)


@pytest.mark.parametrize("dueling", [False, True])
def test_numpy_mlp_update_takes_weights_in_trainable_variables_order(dueling):
    model = q_network((4,), 2, (8, 8), dueling)
    mirror = numpy_networks.NumpyQNetwork(model)
    obs = np.random.default_rng(1).normal(size=(10, 4)).astype(np.float32)
    before = mirror(obs)

    new_weights = _random_weights(model, np.random.default_rng(2))
    for variable, value in zip(model.trainable_variables, new_weights):
        variable.assign(value)
    mirror.update([v.numpy() for v in model.trainable_variables])

    after = mirror(obs)
    np.testing.assert_allclose(after, np.asarray(model(obs)), atol=1e-5)
    assert not np.allclose(after, before)  # the update really changed the mirror


def test_numpy_mlp_update_rejects_wrong_number_of_arrays():
    model = q_network((4,), 2, (8,))
    mirror = numpy_networks.NumpyQNetwork(model)
    with pytest.raises(ValueError, match="expected 4 weight arrays, got 3"):
        mirror.update([v.numpy() for v in model.trainable_variables][:3])


def test_numpy_mlp_of_target_network_named_differently():
    # The learner's target network has another model name; the mirror must still find its layers.
    model = q_network((4,), 2, (8,), dueling=True, name="target_q_network")
    obs = np.random.default_rng(3).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(numpy_networks.NumpyQNetwork(model)(obs), np.asarray(model(obs)), atol=1e-5)


def test_dueling_head_by_hand():
    # One torso unit with identity weights, so h = relu(obs[0]).
    # V(h) = 2h + 1; A(h) = [h, 3h, 5h] -> mean A = 3h;  Q = V + A - mean A = [2h+1-2h, 2h+1, 2h+1+2h].
    # obs [2, *]: h = 2 -> Q = [1, 5, 9];  obs [-1, *]: h = 0 -> Q = [1, 1, 1].
    model = q_network((2,), 3, (1,), dueling=True)
    model.get_layer("torso_0").set_weights([np.array([[1.0], [0.0]]), np.array([0.0])])
    model.get_layer("value_head").set_weights([np.array([[2.0]]), np.array([1.0])])
    model.get_layer("advantage_head").set_weights([np.array([[1.0, 3.0, 5.0]]), np.zeros(3)])
    obs = np.array([[2.0, 7.0], [-1.0, 7.0]], np.float32)
    expected = [[1.0, 5.0, 9.0], [1.0, 1.0, 1.0]]

    np.testing.assert_allclose(np.asarray(model(obs)), expected, atol=1e-6)
    np.testing.assert_allclose(numpy_networks.NumpyQNetwork(model)(obs), expected, atol=1e-6)


def test_q_network_output_is_float32_under_float32_policy():
    assert keras.mixed_precision.global_policy().name == "float32"
    model = q_network((4,), 2, (8,))
    assert model(np.zeros((1, 4), np.float32)).dtype == "float32"


def test_torch_layer_init_draws_kernels_and_biases_within_one_over_sqrt_fan_in():
    keras.utils.set_random_seed(0)
    torch_like = q_network((4,), 2, (256, 256), layer_init="torch")
    glorot = q_network((4,), 2, (256, 256))
    # fan_in 4, 256, 256: bounds 1/2, 1/16, 1/16 (PyTorch's nn.Linear); Glorot's are sqrt(6/260), sqrt(6/512), ...
    for layer, bound in [("torso_0", 0.5), ("torso_1", 1 / 16), ("q_head", 1 / 16)]:
        kernel, bias = torch_like.get_layer(layer).get_weights()
        assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.95 * bound, layer
        assert np.abs(bias).max() <= bound and np.all(bias != 0), layer  # uniform, not zero
        if len(bias) > 100:
            assert np.abs(bias).max() > 0.9 * bound, layer  # spread over the whole interval
        assert not np.any(glorot.get_layer(layer).get_weights()[1])  # Keras: zero biases
    assert np.abs(glorot.get_layer("torso_0").get_weights()[0]).max() <= np.sqrt(6 / 260)


def test_the_continuous_actors_and_critics_take_the_torch_init():
    keras.utils.set_random_seed(0)
    # obs 3 (+ action 2 into the critic), hidden (64, 32): fan_in of each layer -> bound 1/sqrt(fan_in)
    cases = [(deterministic_actor((3,), 2, (64, 32), layer_init="torch"),
              [("torso_0", 3), ("torso_1", 64), ("action_head", 32)]),
             (squashed_gaussian_actor((3,), 2, (64, 32), layer_init="torch"),
              [("torso_0", 3), ("mean_head", 32), ("log_std_head", 32)]),
             (q_critic((3,), 2, (64, 32), "q1", layer_init="torch"),
              [("torso_0", 5), ("torso_1", 64), ("q_head", 32)])]
    for model, layers in cases:
        for layer, fan_in in layers:
            kernel, bias = model.get_layer(layer).get_weights()
            bound = 1 / np.sqrt(fan_in)
            assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.5 * bound, (model.name, layer)
            assert np.abs(bias).max() <= bound and np.all(bias != 0), (model.name, layer)
    glorot = q_critic((3,), 2, (64, 32), "q1")
    assert not np.any(glorot.get_layer("q_head").get_weights()[1])  # Keras' default: zero biases
    # Two heads of one actor start apart: each layer gets its own initializers (one reused would draw the same).
    actor = cases[1][0]
    mean_kernel, log_std_kernel = (actor.get_layer(name).get_weights()[0] for name in ("mean_head", "log_std_head"))
    assert not np.array_equal(mean_kernel, log_std_kernel)
    dueling = q_network((4,), 3, (8,), dueling=True, layer_init="torch")
    value, advantage = (dueling.get_layer(name).get_weights()[0] for name in ("value_head", "advantage_head"))
    assert not np.array_equal(value[:, 0], advantage[:, 0])


def test_actor_critic_layer_init_and_log_std_init():
    keras.utils.set_random_seed(0)
    orthogonal = actor_critic_network((4,), 4, (64, 64), "relu", log_std_size=2)
    torch_like = actor_critic_network((4,), 4, (64, 64), "relu", log_std_size=2, layer_init="torch",
                                               log_std_init=-2.0)
    # orthogonal (SB3's ortho_init): W^T W = gain^2 I for a kernel with more rows than columns, zero biases
    for layer, gain in [("policy_torso_1", np.sqrt(2.0)), ("value_torso_1", np.sqrt(2.0)), ("policy_head", 0.01)]:
        kernel, bias = orthogonal.get_layer(layer).get_weights()
        np.testing.assert_allclose(kernel.T @ kernel, gain ** 2 * np.eye(kernel.shape[1]), atol=1e-5 * gain ** 2 + 1e-6)
        assert not np.any(bias), layer
    np.testing.assert_array_equal(orthogonal.get_layer("log_std").get_weights()[0], [0.0, 0.0])
    # torch (SB3's ortho_init=False): fan_in 4, 64, 64 -> bounds 1/2, 1/8, 1/8, biases drawn too
    bounds = [("policy_torso_0", 0.5), ("value_torso_1", 1 / 8), ("policy_head", 1 / 8), ("value_head", 1 / 8)]
    for layer, bound in bounds:
        kernel, bias = torch_like.get_layer(layer).get_weights()
        assert 0.8 * bound < np.abs(kernel).max() <= bound and np.all(bias != 0) and np.abs(bias).max() <= bound, layer
    np.testing.assert_array_equal(torch_like.get_layer("log_std").get_weights()[0], [-2.0, -2.0])
