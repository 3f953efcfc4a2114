"""Tests of convolutional encoders, input preprocessors of nested observations, and the
gin bindings that give the actor, value and Q networks an image torso."""

import functools

import numpy as np
import pytest
import torch
import torch.nn as nn
from helpers_algorithms import mid_time_step

from alf.algorithms import DqnAlgorithm, PPOAlgorithm, SacAlgorithm
from alf.config import load_config
from alf.networks import (
    NATURE_CONV_LAYERS,
    ActorDistributionNetwork,
    ActorNetwork,
    ConcatEncoder,
    ConvEncoder,
    CriticNetwork,
    EncodingNetwork,
    QNetwork,
    ValueNetwork,
)
from alf.networks.conv_encoder import conv_output_shape
from alf.tensor_specs import BoundedTensorSpec, TensorSpec

ATARI = BoundedTensorSpec((4, 84, 84), torch.uint8, 0, 255)
SMALL_IMAGE = BoundedTensorSpec((3, 16, 16), torch.uint8, 0, 255)
SMALL_CONV = ((8, 4, 2), (16, 3, 1, 1))
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 5)
BOX = BoundedTensorSpec((2,), torch.float32, -np.ones(2), np.ones(2))
DICT_OBS = {"image": SMALL_IMAGE, "vector": TensorSpec((5,))}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _images(spec, batch=2):
    return torch.randint(0, 256, (batch, *spec.shape), dtype=torch.uint8)


def _time_step(observation, batch=2):
    return mid_time_step(observation, batch)


# ----------------------------------------------------------------------------- ConvEncoder


def test_nature_torso_output_shapes_on_84x84():
    assert conv_output_shape((4, 84, 84), NATURE_CONV_LAYERS) == (64, 7, 7)
    encoder = ConvEncoder(input_spec=ATARI, conv_layer_params=NATURE_CONV_LAYERS)
    assert encoder.feature_map_shape == (64, 7, 7) and encoder.output_size == 3136
    assert encoder(_images(ATARI)).shape == (2, 3136)
    net = EncodingNetwork(
        input_spec=ATARI,
        conv_layer_params=NATURE_CONV_LAYERS,
        fc_layer_params=(512,),
        activation="relu",
    )
    assert net.output_size == 512 and net.state_spec == ()
    assert net(_images(ATARI, 3)).shape == (3, 512)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (4, 32, (8, 8), (4, 4)),
        (32, 64, (4, 4), (2, 2)),
        (64, 64, (3, 3), (1, 1)),
    ]
    (linear,) = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert (linear.in_features, linear.out_features) == (3136, 512)


def test_uint8_images_are_cast_not_scaled():
    net = EncodingNetwork(
        input_spec=SMALL_IMAGE, conv_layer_params=SMALL_CONV, fc_layer_params=(7,)
    )
    images = _images(SMALL_IMAGE, 3)
    out = net(images)
    assert out.dtype == torch.float32
    assert torch.allclose(out, net(images.float()))
    assert not torch.allclose(out, net(images.float() / 255.0))
    with torch.no_grad():  # the inference path gives the same values
        assert torch.allclose(net(images), out)


def test_padding_and_single_channel_images():
    # (out_channels, kernel, stride, padding): padding 1 keeps 16x16 with a 3x3 kernel.
    assert conv_output_shape((3, 16, 16), ((8, 3, 1, 1),)) == (8, 16, 16)
    encoder = ConvEncoder(input_spec=TensorSpec((16, 16)), conv_layer_params=((4, 3, 1),))
    assert encoder.output_size == 4 * 14 * 14
    assert encoder(torch.rand(2, 16, 16)).shape == (2, 4 * 14 * 14)


def test_conv_encoder_fc_layers_and_nest_with_one_image():
    encoder = ConvEncoder(
        input_spec={"pixels": SMALL_IMAGE}, conv_layer_params=SMALL_CONV, fc_layer_params=(9,)
    )
    assert encoder.output_size == 9
    assert encoder({"pixels": _images(SMALL_IMAGE)}).shape == (2, 9)


def test_bad_conv_configurations_raise():
    with pytest.raises(ValueError, match="does not fit"):
        ConvEncoder(input_spec=TensorSpec((3, 10, 10)), conv_layer_params=NATURE_CONV_LAYERS)
    with pytest.raises(ValueError, match="single image"):
        EncodingNetwork(input_spec=TensorSpec((5,)), conv_layer_params=SMALL_CONV)
    with pytest.raises(ValueError, match="input_preprocessors"):
        EncodingNetwork(input_spec=DICT_OBS, conv_layer_params=SMALL_CONV)
    with pytest.raises(ValueError, match="out_channels"):
        ConvEncoder(input_spec=SMALL_IMAGE, conv_layer_params=((8, 3),))
    with pytest.raises(ValueError, match="not both"):
        EncodingNetwork(
            input_spec=DICT_OBS,
            conv_layer_params=SMALL_CONV,
            input_preprocessors={"image": ConvEncoder, "vector": None},
        )


# ------------------------------------------------------------------ nested observations


def _dict_obs(batch=2):
    return {"image": _images(SMALL_IMAGE, batch), "vector": torch.randn(batch, 5)}


def test_dict_observation_with_image_and_vector_preprocessors():
    conv = functools.partial(ConvEncoder, conv_layer_params=SMALL_CONV)
    net = EncodingNetwork(
        input_spec=DICT_OBS,
        input_preprocessors={"image": conv, "vector": None},
        fc_layer_params=(12,),
        activation="relu",
    )
    image_size = 16 * 7 * 7
    assert isinstance(net.input_encoder, ConcatEncoder)
    assert net.input_encoder.output_size == image_size + 5
    (linear,) = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert linear.in_features == image_size + 5
    obs = _dict_obs(3)
    out = net(obs)
    assert out.shape == (3, 12)
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    # The vector part is concatenated as it is, after the image features.
    features = net.input_encoder(obs)
    assert torch.equal(features[:, image_size:], obs["vector"])


def test_preprocessor_modules_without_output_size_are_measured():
    vector_encoder = nn.Sequential(nn.Linear(5, 3), nn.Tanh())
    encoder = ConcatEncoder(
        input_spec=DICT_OBS,
        preprocessors={"image": None, "vector": vector_encoder},
    )
    assert encoder.output_size == 3 * 16 * 16 + 3
    assert encoder(_dict_obs()).shape == (2, 3 * 16 * 16 + 3)


def test_preprocessors_must_match_the_observation():
    with pytest.raises(ValueError, match="shaped like the observation"):
        EncodingNetwork(input_spec=DICT_OBS, input_preprocessors={"image": ConvEncoder})


def test_actor_and_value_networks_with_dict_observations():
    preprocessors = {
        "image": functools.partial(ConvEncoder, conv_layer_params=SMALL_CONV),
        "vector": None,
    }
    actor = ActorDistributionNetwork(
        input_spec=DICT_OBS,
        action_spec=DISCRETE,
        fc_layer_params=(8,),
        input_preprocessors=preprocessors,
    )
    value = ValueNetwork(
        input_spec=DICT_OBS, fc_layer_params=(8,), input_preprocessors=preprocessors
    )
    obs = _dict_obs(4)
    assert actor(obs).logits.shape == (4, 6)
    assert value(obs).shape == (4,)


# ---------------------------------------------------------------------------- gin bindings


def test_gin_conv_binding_reaches_actor_and_value_encoders():
    load_config(
        None,
        [
            "EncodingNetwork.conv_layer_params = %NATURE_CONV_LAYERS",
            "ActorDistributionNetwork.fc_layer_params = (512,)",
            "ActorDistributionNetwork.activation = 'relu'",
            "ValueNetwork.fc_layer_params = (512,)",
            "ValueNetwork.activation = 'relu'",
        ],
    )
    algorithm = PPOAlgorithm(observation_spec=ATARI, action_spec=DISCRETE)
    for network in (algorithm.actor_network, algorithm.value_network):
        encoder = network.encoder.input_encoder
        assert isinstance(encoder, ConvEncoder)
        assert encoder.output_size == 3136
        first_fc = next(m for m in network.encoder.mlp if isinstance(m, nn.Linear))
        assert (first_fc.in_features, first_fc.out_features) == (3136, 512)
    step = algorithm.rollout_step(_time_step(_images(ATARI)), ())
    assert step.output.shape == (2,) and step.info.value.shape == (2,)
    spec = algorithm.experience_spec()
    assert spec.observation.shape == (4, 84, 84) and spec.observation.dtype == torch.uint8


def test_scoped_gin_binding_gives_only_the_actor_a_torso():
    load_config(
        None,
        [
            f"actor/EncodingNetwork.conv_layer_params = {SMALL_CONV}",
            "PPOAlgorithm.actor_network_ctor = @actor/ActorDistributionNetwork",
        ],
    )
    algorithm = PPOAlgorithm(observation_spec=SMALL_IMAGE, action_spec=DISCRETE)
    assert isinstance(algorithm.actor_network.encoder.input_encoder, ConvEncoder)
    assert algorithm.value_network.encoder.input_encoder is None


def test_gin_preprocessors_for_dict_observations():
    load_config(
        None,
        [
            "EncodingNetwork.input_preprocessors = {'image': @ConvEncoder, 'vector': None}",
            f"ConvEncoder.conv_layer_params = {SMALL_CONV}",
        ],
    )
    algorithm = PPOAlgorithm(observation_spec=DICT_OBS, action_spec=DISCRETE)
    assert isinstance(algorithm.value_network.encoder.input_encoder, ConcatEncoder)
    step = algorithm.rollout_step(_time_step(_dict_obs()), ())
    assert step.output.shape == (2,)


def test_dqn_q_network_with_the_nature_torso():
    load_config(
        None,
        [
            "EncodingNetwork.conv_layer_params = %NATURE_CONV_LAYERS",
            "QNetwork.fc_layer_params = (512,)",
        ],
    )
    algorithm = DqnAlgorithm(observation_spec=ATARI, action_spec=DISCRETE)
    (torso,) = algorithm.q_network.torsos
    assert isinstance(torso.input_encoder, ConvEncoder) and torso.output_size == 3136
    assert algorithm.q_network.mlp.weights[0].shape == (1, 3136, 512)
    assert algorithm.target_q_network.torsos is not None
    ts = _time_step(_images(ATARI))
    assert algorithm.rollout_step(ts, ()).output.shape == (2,)
    assert algorithm.predict_step(ts, ()).output.shape == (2,)
    assert algorithm.q_network(ts.observation).shape == (2, 1, 6)


def test_q_network_replicas_have_independent_torsos():
    net = QNetwork(
        input_spec=SMALL_IMAGE, action_spec=DISCRETE, num_replicas=2, conv_layer_params=SMALL_CONV
    )
    assert len(net.torsos) == 2
    first, second = (dict(t.named_parameters()) for t in net.torsos)
    weights = [name for name in first if name.endswith("weight")]
    assert all(not torch.equal(first[name], second[name]) for name in weights)
    q = net(_images(SMALL_IMAGE, 3))
    assert q.shape == (3, 2, 6)
    q.sum().backward()
    assert all(p.grad is not None for p in net.parameters())


def test_discrete_sac_with_image_observations():
    load_config(None, [f"EncodingNetwork.conv_layer_params = {SMALL_CONV}"])
    algorithm = SacAlgorithm(observation_spec=SMALL_IMAGE, action_spec=DISCRETE)
    assert len(algorithm.critic_network.torsos) == 2
    assert isinstance(algorithm.actor_network.encoder.input_encoder, ConvEncoder)
    assert algorithm.rollout_step(_time_step(_images(SMALL_IMAGE)), ()).output.shape == (2,)


def test_critic_and_deterministic_actor_with_conv_torsos():
    critic = CriticNetwork(
        input_spec=(SMALL_IMAGE, BOX), num_replicas=2, conv_layer_params=SMALL_CONV
    )
    images = _images(SMALL_IMAGE, 3)
    assert critic(images, torch.rand(3, 2)).shape == (3, 2)
    actor = ActorNetwork(input_spec=SMALL_IMAGE, action_spec=BOX, conv_layer_params=SMALL_CONV)
    action = actor(images)
    assert action.shape == (3, 2) and (action.abs() <= 1).all()


def test_mlp_only_networks_have_no_torso():
    """Without an image encoder the ensembles flatten their input as before: no new
    parameters or modules."""
    q = QNetwork(input_spec=TensorSpec((4,)), action_spec=DISCRETE)
    assert q.torsos is None
    assert {name.split(".")[0] for name, _ in q.named_parameters()} == {"mlp"}
    critic = CriticNetwork(input_spec=(TensorSpec((4,)), BOX))
    assert critic.torsos is None
    assert critic(torch.randn(5, 4), torch.rand(5, 2)).shape == (5, 1)


def test_channels_last_images_are_permuted_to_channels_first():
    """A board game's ``[H, W, C]`` planes (PettingZoo's classic games) through
    ``channels_last``: the same features as the ``[C, H, W]`` image through a
    channels-first encoder with the same weights."""
    board = TensorSpec((6, 7, 2))
    layers = ((8, 3, 1, 1), (8, 3, 1, 1))
    last = ConvEncoder(input_spec=board, conv_layer_params=layers, channels_last=True)
    first = ConvEncoder(input_spec=TensorSpec((2, 6, 7)), conv_layer_params=layers)
    first.load_state_dict(last.state_dict())
    assert last.output_size == first.output_size == 8 * 6 * 7
    x = torch.randn(4, 6, 7, 2)
    torch.testing.assert_close(last(x), first(x.permute(0, 3, 1, 2)))
    with pytest.raises(ValueError, match=r"channels_last needs \[H, W, C\]"):
        ConvEncoder(input_spec=TensorSpec((6, 7)), conv_layer_params=layers, channels_last=True)
