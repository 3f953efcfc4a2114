"""Device-generic code: checks, runnable on a CPU-only machine, for the bugs that appear
when an algorithm and its inputs live on an accelerator (``TrainerConfig.device``).

Without a GPU, a tensor created on the host inside ``rollout_step`` or ``train_step``
goes unnoticed: everything is on the CPU anyway. These tests look for the causes instead:

* :func:`test_step_functions_create_no_host_tensors`: while an algorithm's step, loss,
  preprocessing, target-update and data-transformer hooks run (through the usual
  entry points: :class:`SyncUnroller`, ``train_from_unroll``, ``train_from_replay``), a
  ``TorchFunctionMode`` records every tensor factory (``torch.zeros``, ``torch.tensor``,
  ``torch.arange``, ``torch.rand``...) called without ``device=`` (and without a tensor
  argument whose device it would inherit), and every ``Tensor.numpy()``, whose call site
  is in one of the :data:`AUDITED` files. Such a tensor is on the CPU whatever the
  module's device: mixing it with device tensors fails (``torch.where``, ``torch.cat``,
  boolean masks, arithmetic with non-scalars) or silently moves work to the host.
* :func:`test_no_tensors_outside_registered_parameters_and_buffers`: a tensor that a
  module keeps in a plain attribute (or in a helper object such as a target updater) is
  not moved by ``module.to(device)``.
* :func:`test_target_updater_follows_replaced_buffers`: ``module.to(...)`` replaces
  buffer tensors; the target updater must update the new ones.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as nn
from helpers_device import REPO, HostTensorRecorder

from alf import nest
from alf.algorithms import (
    ActorCriticAlgorithm,
    AppoAlgorithm,
    DdpgAlgorithm,
    DqnAlgorithm,
    PPOAlgorithm,
    SacAlgorithm,
    Td3Algorithm,
)
from alf.algorithms.off_policy_algorithm import OffPolicyAlgorithm
from alf.algorithms.policy import Policy
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import StepType, TimeStep
from alf.data_transformers import (
    FrameStacker,
    ImageScale,
    ObservationNormalizer,
    RewardNormalizer,
    RewardScaling,
    build_data_transformer,
)
from alf.networks import (
    ActorDistributionNetwork,
    ActorNetwork,
    CriticNetwork,
    EncodingNetwork,
    QNetwork,
    ValueNetwork,
)
from alf.replay_buffers import ReplayBuffer
from alf.tensor_specs import BoundedTensorSpec, TensorSpec
from alf.unrollers import SyncUnroller
from alf.utils.target_update import TargetUpdater, make_target

HOOKS = (
    "predict_step",
    "rollout_step",
    "preprocess_experience",
    "train_step",
    "calc_loss",
    "after_update",
    "after_train_iter",
)
TRANSFORMER_HOOKS = ("transform_timestep", "transform_experience")


def _watch(recorder: HostTensorRecorder, algorithm: RLAlgorithm) -> None:
    """Turns recording on inside the algorithm's and its data transformers' hooks (set
    on the instances, so the base classes' entry points call the wrapped ones)."""
    for name in HOOKS:
        object.__setattr__(algorithm, name, recorder.watching(getattr(algorithm, name)))
    chain = algorithm.data_transformer
    for name in TRANSFORMER_HOOKS:
        object.__setattr__(chain, name, recorder.watching(getattr(chain, name)))


# ----------------------------------------------------------------------- set-ups
VECTOR = BoundedTensorSpec((4,), torch.float32, -np.ones(4), np.ones(4))
IMAGE = BoundedTensorSpec((1, 12, 12), torch.uint8, 0, 255)
DISCRETE = BoundedTensorSpec((), torch.int64, 0, 2)
BOX = BoundedTensorSpec((2,), torch.float32, -2 * np.ones(2), 2 * np.ones(2))
CONV = ((4, 3, 2),)
NUM_ENVS = 3


class _Env:
    """A tiny batched environment of random observations and rewards with episodes of
    ``episode_length`` steps (terminated on odd environments, truncated on even ones)."""

    def __init__(self, observation_spec: Any, action_spec: Any, episode_length: int = 4):
        self.batch_size = NUM_ENVS
        self._observation_spec = observation_spec
        self._action_spec = action_spec
        self._length = episode_length
        self._t = torch.zeros(NUM_ENVS, dtype=torch.int64)
        self._gen = torch.Generator().manual_seed(0)

    def observation_spec(self) -> Any:
        return self._observation_spec

    def action_spec(self) -> Any:
        return self._action_spec

    def _observation(self) -> Any:
        def draw(spec: TensorSpec) -> torch.Tensor:
            shape = (NUM_ENVS, *spec.shape)
            if spec.dtype == torch.uint8:
                return torch.randint(0, 256, shape, generator=self._gen, dtype=torch.uint8)
            return torch.rand(shape, generator=self._gen) * 2 - 1

        return nest.map_structure(draw, self._observation_spec)

    def _time_step(self, step_type: torch.Tensor, reward: torch.Tensor, discount, action):
        return TimeStep(
            step_type=step_type.to(torch.int32),
            reward=reward,
            discount=discount,
            observation=self._observation(),
            prev_action=action,
            env_id=torch.arange(NUM_ENVS),
        )

    def reset(self) -> TimeStep:
        self._t.zero_()
        action = nest.map_structure(lambda s: s.zeros((NUM_ENVS,)), self._action_spec)
        return self._time_step(
            torch.full((NUM_ENVS,), StepType.FIRST),
            torch.zeros(NUM_ENVS),
            torch.ones(NUM_ENVS),
            action,
        )

    def step(self, action: torch.Tensor) -> TimeStep:
        was_last = self._t >= self._length
        self._t = torch.where(was_last, torch.zeros_like(self._t), self._t + 1)
        last = self._t >= self._length
        step_type = torch.where(
            was_last,
            StepType.FIRST,
            torch.where(last, StepType.LAST, StepType.MID),
        )
        reward = torch.where(was_last, 0.0, torch.rand(NUM_ENVS, generator=self._gen))
        terminated = last & (torch.arange(NUM_ENVS) % 2 == 1)
        discount = torch.where(terminated, 0.0, 1.0)
        return self._time_step(step_type, reward, discount, action)

    def close(self) -> None:
        pass


def _small(ctor: Callable, **kwargs: Any) -> Callable:
    return functools.partial(ctor, fc_layer_params=(8,), **kwargs)


SETUPS: dict[str, dict[str, Any]] = {
    "a2c_discrete": dict(cls=ActorCriticAlgorithm, action=DISCRETE),
    "ppo_discrete": dict(cls=PPOAlgorithm, action=DISCRETE, mini_batch_size=4, num_epochs=2),
    "ppo_continuous_normalizers": dict(
        cls=PPOAlgorithm,
        action=BOX,
        mini_batch_size=4,
        num_epochs=2,
        value_clip=0.2,
        transformers=[
            ObservationNormalizer,
            functools.partial(RewardNormalizer, center=True),
            functools.partial(RewardScaling, scale=0.5),
        ],
    ),
    "ppo_return_normalizer": dict(
        cls=PPOAlgorithm,
        action=BOX,
        mini_batch_size=4,
        num_epochs=2,
        transformers=[
            ObservationNormalizer,
            functools.partial(RewardNormalizer, return_based=True),
        ],
    ),
    "ppo_lstm": dict(
        cls=PPOAlgorithm,
        action=DISCRETE,
        networks=dict(lstm_hidden_size=4),
        mini_batch_size=8,
        mini_batch_length=2,
    ),
    "ppo_cnn_frame_stack": dict(
        cls=PPOAlgorithm,
        action=DISCRETE,
        observation=IMAGE,
        networks=dict(conv_layer_params=CONV),
        transformers=[ImageScale, functools.partial(FrameStacker, stack_size=3)],
        mini_batch_size=6,
    ),
    "appo_discrete": dict(cls=AppoAlgorithm, action=DISCRETE, mini_batch_size=4, num_epochs=2),
    "appo_lstm": dict(
        cls=AppoAlgorithm,
        action=DISCRETE,
        networks=dict(lstm_hidden_size=4),
        mini_batch_size=8,
        mini_batch_length=2,
    ),
    "sac_lstm_encoder": dict(
        cls=SacAlgorithm,
        action=BOX,
        encoder_ctor=functools.partial(EncodingNetwork, fc_layer_params=(8,), lstm_hidden_size=4),
        burn_in=2,
    ),
    "dqn_lstm_encoder": dict(
        cls=DqnAlgorithm,
        action=DISCRETE,
        encoder_ctor=functools.partial(EncodingNetwork, fc_layer_params=(8,), lstm_hidden_size=4),
        burn_in=1,
        target_update_period=2,
    ),
    "appo_continuous": dict(cls=AppoAlgorithm, action=BOX),
    "sac_continuous": dict(cls=SacAlgorithm, action=BOX),
    "sac_discrete": dict(cls=SacAlgorithm, action=DISCRETE),
    "dqn": dict(cls=DqnAlgorithm, action=DISCRETE, target_update_period=2),
    "dqn_cnn_frame_stack_prioritized": dict(
        cls=DqnAlgorithm,
        action=DISCRETE,
        observation=IMAGE,
        networks=dict(conv_layer_params=CONV),
        transformers=[ImageScale, functools.partial(FrameStacker, stack_size=2)],
        prioritized=True,
    ),
    "ddpg_gaussian": dict(cls=DdpgAlgorithm, action=BOX),
    "ddpg_ou": dict(cls=DdpgAlgorithm, action=BOX, exploration_noise="ou"),
    "td3": dict(cls=Td3Algorithm, action=BOX),
}

NETWORK_ARGS = {
    ActorCriticAlgorithm: ("actor_network_ctor", "value_network_ctor"),
    SacAlgorithm: ("actor_network_ctor", "critic_network_ctor", "q_network_ctor"),
    DqnAlgorithm: ("q_network_ctor",),
    DdpgAlgorithm: ("actor_network_ctor", "critic_network_ctor"),
}
NETWORKS = {
    "actor_network_ctor": ActorDistributionNetwork,
    "value_network_ctor": ValueNetwork,
    "critic_network_ctor": CriticNetwork,
    "q_network_ctor": QNetwork,
}


def _build(setup: dict[str, Any]) -> tuple[RLAlgorithm, _Env]:
    setup = dict(setup)
    cls = setup.pop("cls")
    action_spec = setup.pop("action")
    observation_spec = setup.pop("observation", VECTOR)
    network_kwargs = setup.pop("networks", {})
    transformers = setup.pop("transformers", [])
    prioritized = setup.pop("prioritized", False)
    env = _Env(observation_spec, action_spec)
    chain = build_data_transformer(transformers, observation_spec)
    torch.manual_seed(0)
    kwargs = dict(setup)
    base = next(c for c in cls.__mro__ if c in NETWORK_ARGS)
    for arg in NETWORK_ARGS[base]:
        ctor = NETWORKS[arg]
        if base is DdpgAlgorithm and arg == "actor_network_ctor":
            ctor = ActorNetwork
        # Critic and Q networks take the observation encoder but no LSTM.
        extra = {
            k: v
            for k, v in network_kwargs.items()
            if k != "lstm_hidden_size" or arg in ("actor_network_ctor", "value_network_ctor")
        }
        if ctor is ActorNetwork:
            extra.pop("lstm_hidden_size", None)
        kwargs[arg] = _small(ctor, **extra)
    if issubclass(cls, OffPolicyAlgorithm):
        kwargs.update(
            mini_batch_size=4,
            mini_batch_length=3,
            replay_buffer_ctor=functools.partial(
                ReplayBuffer, max_length=32, prioritized=prioritized
            ),
        )
    algorithm = cls(
        observation_spec=chain.transformed_observation_spec, action_spec=action_spec, **kwargs
    )
    algorithm.set_data_transformer(chain)
    return algorithm, env


def _train(algorithm: RLAlgorithm, env: _Env, iterations: int = 3) -> int:
    """Collects and trains as the synchronous trainer does; returns the number of
    training iterations that updated."""
    unroller = SyncUnroller(env=env, policy=Policy(algorithm=algorithm), unroll_length=4)
    trained = 0
    for _ in range(iterations):
        exp = unroller.unroll()
        if isinstance(algorithm, OffPolicyAlgorithm):
            algorithm.observe_for_replay(unroller.new_rows(exp))
            if algorithm.can_train():
                algorithm.train_from_replay()
                trained += 1
        else:
            algorithm.train_from_unroll(exp)
            trained += 1
    return trained


def _predict(algorithm: RLAlgorithm, env: _Env) -> None:
    chain = algorithm.data_transformer
    time_step, _ = chain.transform_timestep(env.reset(), chain.initial_state(NUM_ENVS))
    state = algorithm.zero_state(algorithm.predict_state_spec, NUM_ENVS)
    for _ in range(2):
        state = algorithm.predict_step(time_step, state).state


@pytest.fixture
def recorder() -> Iterator[HostTensorRecorder]:
    with HostTensorRecorder() as mode:
        yield mode


@pytest.mark.parametrize("name", list(SETUPS))
def test_step_functions_create_no_host_tensors(name: str, recorder: HostTensorRecorder):
    algorithm, env = _build(SETUPS[name])
    if isinstance(algorithm, OffPolicyAlgorithm):
        algorithm.build_replay_buffer(num_envs=NUM_ENVS)
    _watch(recorder, algorithm)
    assert _train(algorithm, env) >= 2
    _predict(algorithm, env)
    assert not recorder.calls, (
        f"{name}: tensors created on the host inside step/loss code (they stay on the "
        f"CPU when the algorithm is on an accelerator; pass device=):\n{recorder.report()}"
    )


def test_recorder_flags_host_factories_in_audited_files(recorder: HostTensorRecorder):
    """The check itself: code compiled as if it were in an audited file is flagged for
    ``torch.zeros(n)`` and ``torch.tensor(0.5)``, not for device-following calls."""
    source = (
        "def step(x, torch):\n"
        "    torch.zeros(3)\n"
        "    torch.tensor(0.5)\n"
        "    torch.zeros(3, device=x.device)\n"
        "    torch.zeros_like(x)\n"
        "    torch.as_tensor(x)\n"
        "    torch.normal(x, 1.0)\n"
        "    torch.rand(2, device=x.device)\n"
        "    return x.new_zeros(2)\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, str(REPO / "alf" / "algorithms" / "dqn.py"), "exec"), namespace)
    recorder.watching(namespace["step"])(torch.ones(2), torch)
    flagged = sorted((line, name) for (_, line, _, name) in recorder.calls)
    assert flagged == [(2, "zeros"), (3, "tensor")]


# ------------------------------------------------- tensors that .to() would not move
FUNCTIONS = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)


def _stray_tensors(module: nn.Module) -> list[str]:
    """Paths of tensors that ``module``'s submodules hold outside their registered
    parameters and buffers (in plain attributes, containers or helper objects)."""
    registered = {id(d) for m in module.modules() for d in (m._parameters, m._buffers)}
    found: list[str] = []

    def visit(value: Any, path: str, depth: int) -> None:
        if isinstance(value, torch.Tensor):
            found.append(path)
        elif depth > 4 or isinstance(value, (nn.Module, torch.optim.Optimizer, type)):
            return  # submodules are visited on their own; optimizers are built lazily
        elif isinstance(value, dict):
            if id(value) not in registered:
                for key, item in value.items():
                    visit(item, f"{path}[{key!r}]", depth + 1)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for i, item in enumerate(value):
                visit(item, f"{path}[{i}]", depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, FUNCTIONS):
            for key, item in vars(value).items():
                visit(item, f"{path}.{key}", depth + 1)

    for prefix, sub in module.named_modules():
        for key, value in vars(sub).items():
            if key not in ("_parameters", "_buffers", "_modules"):
                visit(value, f"{prefix or type(module).__name__}.{key}", 0)
    return found


@pytest.mark.parametrize("name", list(SETUPS))
def test_no_tensors_outside_registered_parameters_and_buffers(name: str):
    algorithm, _ = _build(SETUPS[name])
    stray = _stray_tensors(algorithm)
    assert not stray, "tensors that module.to(device) would leave behind:\n" + "\n".join(stray)


def test_target_updater_follows_replaced_buffers():
    """``module.to(device)`` replaces every buffer by a new tensor (here a dtype round
    trip does the same on the CPU); the updater must then update the new buffers."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.register_buffer("running", torch.zeros(2))

    source = Net()
    target = make_target(source)
    updater = TargetUpdater(sources=[source], targets=[target], tau=1.0)
    old_buffer = source.running
    for module in (source, target):
        module.double().float()
    assert source.running is not old_buffer
    with torch.no_grad():
        source.running.fill_(3.0)
        source.fc.weight.add_(1.0)
    updater()
    assert torch.equal(target.running, source.running)
    assert torch.equal(target.fc.weight, source.fc.weight)
