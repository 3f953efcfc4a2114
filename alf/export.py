"""Export of a trained policy to ONNX or TorchScript (``python -m alf.bin.export``).

The exported model is :class:`GreedyPolicy`: one step of the greedy policy that
evaluation and ``alf.bin.play`` act with (:meth:`alf.algorithms.policy.Policy.greedy_step`,
traced), from *raw* environment observations: the run's data transformers (observation
normalisers with their checkpointed statistics, image scaling, frame stacking) are part
of it. Recurrent state, an LSTM's or a frame stacker's, is an explicit input and output:
the caller feeds each step's ``next_*`` outputs back as the next step's ``*`` inputs, and
``step_type`` 0 (FIRST) starts a new episode (the state fed with it is ignored).

Inputs, in order (every tensor's axis 0 is the batch, of any size):

- ``step_type``: int32 ``[B]``: 0 at the first step of an episode (after a reset), 1
  (or 2) otherwise;
- the observation: ``observation`` for a single tensor, ``observation.<key>`` for each
  leaf of a nest (e.g. ``observation.action_mask`` of a Dict observation), with the
  environment's dtype and shape;
- ``policy_state.<path>``: the state of the algorithm's ``predict_step`` (e.g. an LSTM's
  ``h`` and ``c``), if any;
- ``transform_state.<path>``: the data transformers' state (a frame stacker's previous
  frames), if any.

Outputs: ``action`` (or ``action.<path>`` for a nest of actions), then
``next_policy_state.<path>`` and ``next_transform_state.<path>`` matching the state
inputs. :class:`PolicySignature` lists them with shapes and dtypes; it is stored in the
exported file (ONNX metadata ``alf_signature``, TorchScript extra file
``alf_signature.json``) and documented in ``docs/export.md``.

This module sits above :mod:`alf.trainers` (it traces the evaluator's step), below
:mod:`alf.bin`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn as nn

from alf import nest
from alf.algorithms.policy import Policy, PolicyState
from alf.data_structures import StepType, TimeStep
from alf.errors import UserError, install_hint

__all__ = [
    "FORMATS",
    "SIGNATURE_KEY",
    "ExportError",
    "ExportResult",
    "GreedyPolicy",
    "PolicySignature",
    "TensorInfo",
    "export_policy",
    "named_leaves",
    "read_signature",
]

FORMATS = ("onnx", "torchscript")
"""The formats :func:`export_policy` writes."""

SIGNATURE_KEY = "alf_signature"
"""ONNX metadata key (and, with ``.json``, TorchScript extra file) holding the signature."""

ONNX_OPSET = 17
"""The ONNX opset of exported models (onnxruntime 1.14 and later run it)."""

STATE_PREFIXES = ("policy_state", "transform_state")
"""Names of the state inputs start with one of these (outputs with ``next_``)."""

BATCH = "batch"
"""Name of the dynamic batch axis in shapes."""


class ExportError(UserError, ValueError):
    """A policy that cannot be exported as asked: an unknown format, a missing package."""


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of an exported policy.

    Attributes:
        name: its name in the exported model.
        shape: its shape, ``"batch"`` first.
        dtype: the torch dtype's name, e.g. ``"float32"``, ``"uint8"``, ``"int64"``.
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str


@dataclass(frozen=True)
class PolicySignature:
    """The inputs and outputs of an exported policy, in order.

    Attributes:
        inputs: ``step_type``, the observation leaves, the state leaves.
        outputs: the action leaves, then the next state leaves (same order as the
            state inputs).
    """

    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]

    @property
    def input_names(self) -> list[str]:
        """The inputs' names."""
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """The outputs' names."""
        return [t.name for t in self.outputs]

    @property
    def state_names(self) -> list[tuple[str, str]]:
        """``(input, output)`` name pairs of the state fed back each step."""
        return [
            (t.name, f"next_{t.name}")
            for t in self.inputs
            if t.name.split(".")[0] in STATE_PREFIXES
        ]

    def to_json(self) -> str:
        """The signature as JSON (``{"inputs": [...], "outputs": [...]}``)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PolicySignature:
        """Reads :meth:`to_json`'s output."""
        data = json.loads(text)
        return cls(
            inputs=tuple(_tensor_info(t) for t in data["inputs"]),
            outputs=tuple(_tensor_info(t) for t in data["outputs"]),
        )


def _tensor_info(data: dict[str, Any]) -> TensorInfo:
    return TensorInfo(name=data["name"], shape=tuple(data["shape"]), dtype=data["dtype"])


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def named_leaves(prefix: str, tree: Any) -> list[tuple[str, Any]]:
    """``(name, leaf)`` of every leaf of ``tree`` (specs or tensors), in the order of
    :func:`alf.nest.flatten`, named as in an exported policy: ``prefix`` for a single
    leaf at the root, else ``prefix.<dotted path>`` (e.g. ``observation.action_mask``)."""
    named: list[tuple[str, Any]] = []

    def visit(path: str, leaf: Any) -> Any:
        named.append((f"{prefix}.{path}" if path else prefix, leaf))
        return leaf

    nest.map_structure_with_path(visit, tree)
    return named


class GreedyPolicy(nn.Module):
    """One step of an algorithm's greedy policy on raw observations, as a module of flat
    tensors (traceable): ``forward(step_type, *observation, *policy_state,
    *transform_state) -> (*action, *next_policy_state, *next_transform_state)``.

    It runs :meth:`alf.algorithms.policy.Policy.greedy_step`, the step evaluation and
    ``play`` take: state reset at FIRST, data transformers, ``predict_step``.

    Args:
        algorithm: the trained algorithm (its data transformers included); put in eval
            mode.
    """

    def __init__(self, *, algorithm: Any) -> None:
        super().__init__()
        self.algorithm = algorithm.eval()
        self.policy = Policy(algorithm=self.algorithm)
        transformer = algorithm.data_transformer
        self._observation_spec = transformer.observation_spec
        self._policy_state_spec = algorithm.predict_state_spec
        self._transform_state_spec = transformer.state_spec
        self._action_spec = algorithm.action_spec
        self._inputs = [
            ("step_type", None),
            *named_leaves("observation", self._observation_spec),
            *named_leaves("policy_state", self._policy_state_spec),
            *named_leaves("transform_state", self._transform_state_spec),
        ]
        self._num_observations = len(nest.flatten(self._observation_spec))
        self._num_policy_states = len(nest.flatten(self._policy_state_spec))

    @property
    def signature(self) -> PolicySignature:
        """The names, shapes and dtypes of the inputs and outputs."""

        def info(name: str, spec: Any) -> TensorInfo:
            return TensorInfo(
                name=name, shape=(BATCH, *tuple(spec.shape)), dtype=_dtype_name(spec.dtype)
            )

        inputs = [TensorInfo(name="step_type", shape=(BATCH,), dtype="int32")]
        inputs += [info(name, spec) for name, spec in self._inputs[1:]]
        outputs = [info(name, spec) for name, spec in named_leaves("action", self._action_spec)]
        outputs += [
            TensorInfo(name=f"next_{t.name}", shape=t.shape, dtype=t.dtype)
            for t in inputs
            if t.name.split(".")[0] in STATE_PREFIXES
        ]
        return PolicySignature(inputs=tuple(inputs), outputs=tuple(outputs))

    def example_inputs(self, batch_size: int = 2) -> tuple[torch.Tensor, ...]:
        """Inputs of ``batch_size`` environments: the first starting an episode, the
        others in one; zero observations and states."""
        step_type = torch.full((batch_size,), StepType.MID, dtype=torch.int32)
        step_type[0] = StepType.FIRST
        zeros = [spec.zeros((batch_size,)) for _, spec in self._inputs[1:]]
        return (step_type, *zeros)

    def forward(self, step_type: torch.Tensor, *leaves: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One greedy step; see the class docstring for the order of the tensors."""
        n_obs, n_state = self._num_observations, self._num_policy_states
        observation = nest.pack_sequence_as(self._observation_spec, leaves[:n_obs])
        state = nest.pack_sequence_as(self._policy_state_spec, leaves[n_obs : n_obs + n_state])
        transform_state = nest.pack_sequence_as(
            self._transform_state_spec, leaves[n_obs + n_state :]
        )
        # What the environment gives besides the observation; predict_step and the
        # transformers' policy path read only ``step_type`` and ``observation``.
        zeros = torch.zeros_like(step_type, dtype=torch.float32)
        time_step = TimeStep(
            step_type=step_type,
            reward=zeros,
            discount=zeros + 1.0,
            observation=observation,
            prev_action=nest.map_structure(
                lambda s: zeros.reshape(-1, *([1] * len(s.shape))).expand(-1, *s.shape).to(s.dtype),
                self._action_spec,
            ),
            env_id=torch.zeros_like(step_type, dtype=torch.int64),
        )
        action, (state, transform_state) = self.policy.greedy_step(
            time_step, PolicyState(algorithm=state, transform=transform_state)
        )
        return (*nest.flatten(action), *nest.flatten(state), *nest.flatten(transform_state))


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_policy` wrote.

    Attributes:
        path: the file.
        format: ``"onnx"`` or ``"torchscript"``.
        signature: the model's inputs and outputs.
        seconds: wall time of the export (tracing and writing).
    """

    path: str
    format: str
    signature: PolicySignature
    seconds: float


def check_format(format: str) -> str:  # noqa: A002 - the CLI's flag name
    """Returns ``format`` if :func:`export_policy` writes it.

    Raises:
        ExportError: an unknown format, or ``onnx`` without the ``onnx`` package.
    """
    if format not in FORMATS:
        raise ExportError(f"unknown export format '{format}' (choose one of: {', '.join(FORMATS)})")
    if format == "onnx":
        try:
            import onnx  # noqa: F401
        except ImportError as err:
            raise ExportError(
                "the onnx format needs the onnx package: " + install_hint("export")
            ) from err
    return format


def export_policy(
    algorithm: Any,
    path: str,
    *,
    format: str,
    batch_size: int = 2,  # noqa: A002
) -> ExportResult:
    """Writes ``algorithm``'s greedy policy (:class:`GreedyPolicy`) to ``path``.

    Args:
        algorithm: the trained algorithm, on the CPU (traced in eval mode; its mode is
            restored afterwards).
        path: the file to write (its folder is created; an existing file is replaced
            only once the export succeeded).
        format: ``"onnx"`` (opset :data:`ONNX_OPSET`, the legacy TorchScript-based
            exporter) or ``"torchscript"`` (``torch.jit.trace``).
        batch_size: the batch of the example inputs it is traced with; the exported
            batch axis is dynamic.

    Returns:
        The path, format, signature and time taken.

    Raises:
        ExportError: an unknown format, or a missing package.
    """
    check_format(format)
    start = time.perf_counter()
    was_training = algorithm.training
    policy = GreedyPolicy(algorithm=algorithm)
    signature = policy.signature
    example = policy.example_inputs(batch_size)
    path = os.path.abspath(os.path.expanduser(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.partial-{os.getpid()}"
    try:
        with torch.no_grad():
            if format == "torchscript":
                _write_torchscript(policy, example, signature, partial)
            else:
                _write_onnx(policy, example, signature, partial)
        os.replace(partial, path)
    finally:
        algorithm.train(was_training)
        if os.path.exists(partial):
            os.remove(partial)
    return ExportResult(
        path=path, format=format, signature=signature, seconds=time.perf_counter() - start
    )


def _write_torchscript(
    policy: GreedyPolicy,
    example: Sequence[torch.Tensor],
    signature: PolicySignature,
    path: str,
) -> None:
    traced = torch.jit.trace(policy, tuple(example), check_trace=False)
    torch.jit.save(traced, path, _extra_files={f"{SIGNATURE_KEY}.json": signature.to_json()})


def _write_onnx(
    policy: GreedyPolicy,
    example: Sequence[torch.Tensor],
    signature: PolicySignature,
    path: str,
) -> None:
    import onnx

    names = signature.input_names + signature.output_names
    torch.onnx.export(
        policy,
        tuple(example),
        path,
        dynamo=False,
        input_names=signature.input_names,
        output_names=signature.output_names,
        dynamic_axes={name: {0: BATCH} for name in names},
        opset_version=ONNX_OPSET,
    )
    model = onnx.load(path)
    _restore_unused_inputs(model, signature)
    entry = model.metadata_props.add()
    entry.key = SIGNATURE_KEY
    entry.value = signature.to_json()
    onnx.save(model, path)


def _restore_unused_inputs(model: Any, signature: PolicySignature) -> None:
    """Puts back the inputs the exporter dropped because no output depends on them
    (``step_type`` of a stateless policy), so every exported policy takes all the inputs
    of its signature, in its order."""
    import onnx

    present = {value.name: value for value in model.graph.input}
    if all(name in present for name in signature.input_names):
        return
    inputs = []
    for tensor in signature.inputs:
        value = present.get(tensor.name)
        if value is None:
            elem_type = onnx.helper.np_dtype_to_tensor_dtype(
                torch.empty((), dtype=getattr(torch, tensor.dtype)).numpy().dtype
            )
            value = onnx.helper.make_tensor_value_info(tensor.name, elem_type, list(tensor.shape))
        inputs.append(value)
    del model.graph.input[:]
    model.graph.input.extend(inputs)


def read_signature(path: str) -> PolicySignature:
    """The signature stored in an exported policy file (ONNX or TorchScript).

    Raises:
        ExportError: the file holds no ALF signature.
    """
    with open(path, "rb") as f:
        is_zip = f.read(2) == b"PK"  # TorchScript files are zip archives
    if is_zip:
        extra = {f"{SIGNATURE_KEY}.json": ""}
        torch.jit.load(path, map_location="cpu", _extra_files=extra)
        text = extra[f"{SIGNATURE_KEY}.json"]
    else:
        import onnx

        props = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
        text = props.get(SIGNATURE_KEY, "")
    if not text:
        raise ExportError(f"'{path}' holds no ALF policy signature")
    return PolicySignature.from_json(text)
