"""ALF's offline RL algorithms side by side with d3rlpy's on the same dataset (issue 34).

For each algorithm (``iql``, ``cql``, ``td3bc``, ``bc``) and seed, the benchmark runs
ALF (``alf.bin.train`` with ``alf/examples/<algo>_hopper_medium.gin``, the environment,
dataset, budget and seed given by ``--conf_param``) and d3rlpy 2.8.1 (from its own
virtual environment, :mod:`benchmarks.peers.d3rlpy_offline`) one after the other,
alternating which goes first from one run pair to the next so that drifting load hits
both alike. Both train the same number of gradient steps on the same Minari-format
dataset (its HDF5 file, read by each framework) and evaluate their greedy policies in
the same Gymnasium environment with the same number of episodes after every
``--eval_interval`` steps.

The same hyperparameters: a worker process loads the ALF config (with any
``--conf_param`` given here, which reach both frameworks) and reads every setting the
algorithm uses, bound or default; :func:`d3rlpy_spec` maps each explicitly onto
d3rlpy's config fields (``--show_mapping`` prints the table) and refuses a binding it
has no mapping for, or a value d3rlpy cannot express, so a changed config never runs
against an unchanged peer unnoticed.

Reported per algorithm and framework: the final evaluation return (the last
evaluation's average over its episodes) as IQM over seeds with a 95% stratified
bootstrap interval (:func:`alf.experiments.stats.iqm_interval_estimates`), the same for
the D4RL-normalised score ``100 (R - random) / (expert - random)`` when the dataset's
metadata has Minari's ``ref_min_score``/``ref_max_score``, and updates/s: gradient
steps over the time spent in them (sampling, data transformation, losses, optimizer
steps, target updates; ALF's ``train_time_s`` of ``progress.jsonl``, d3rlpy's
``fitter`` loop timed between evaluations; neither includes evaluation or setup), with
the ALF/d3rlpy ratio of each seed's back-to-back pair. ``uptime`` is printed before and
after every run. Raw numbers: ``<root_dir>/results.json``. A run whose result is in
``<root_dir>`` already is not run again (``--rerun`` runs it anyway).

Usage::

    python -m benchmarks.peers.offline --dataset=tests/data/datasets/pendulum-sac-v0 \\
        --env=Pendulum-v1 --algos=iql,cql --seeds=0,1,2 --steps=10000 \\
        --eval_interval=2000 --root_dir=/tmp/offline_bench
    python -m benchmarks.peers.offline --dataset=alf/hopper-medium-v0 --algos=iql,cql,td3bc,bc \\
        --seeds=0,1,2 --steps=500000 --eval_interval=5000 --root_dir=/tmp/offline_hopper
    python -m benchmarks.peers.offline --show_mapping [--algos=...] [--conf_param=...]

``--dataset``: a dataset directory or the id of a dataset in Minari's local path;
``--env``: the Gymnasium id (default: the dataset's own ``env_spec``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.join(__file__, "..", "..", "..")))  # the repo root
from benchmarks.common import (  # noqa: E402
    emit_result,
    fmt_num,
    format_table,
    machine_info,
    run_worker,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "alf" / "examples"
PEER = Path(__file__).resolve().parent / "d3rlpy_offline.py"
FRAMEWORKS = ("alf", "d3rlpy")


# --------------------------------------------------------------------------- ALF's settings


@dataclasses.dataclass(frozen=True)
class AlgoSpec:
    """One algorithm in both frameworks.

    Attributes:
        conf: ALF's example config (in ``alf/examples``).
        alf_class: the ALF algorithm's configurable name.
        networks: the network configurables whose settings the mapping reads.
        d3rlpy_config: the d3rlpy config class (in ``d3rlpy.algos``).
    """

    conf: str
    alf_class: str
    networks: tuple[str, ...]
    d3rlpy_config: str


ALGOS: dict[str, AlgoSpec] = {
    "iql": AlgoSpec(
        "iql_hopper_medium.gin",
        "IqlAlgorithm",
        ("ActorDistributionNetwork", "CriticNetwork", "ValueNetwork"),
        "IQLConfig",
    ),
    "cql": AlgoSpec(
        "cql_hopper_medium.gin",
        "CqlAlgorithm",
        ("ActorDistributionNetwork", "CriticNetwork"),
        "CQLConfig",
    ),
    "td3bc": AlgoSpec(
        "td3bc_hopper_medium.gin",
        "Td3BcAlgorithm",
        ("ActorNetwork", "CriticNetwork"),
        "TD3PlusBCConfig",
    ),
    "bc": AlgoSpec(
        "bc_hopper_medium.gin",
        "BcAlgorithm",
        ("ActorNetwork", "ActorDistributionNetwork"),
        "BCConfig",
    ),
}

# Bindings of the ALF configs that are not hyperparameters of the algorithm: the
# benchmark sets the budget, evaluation and data itself (TrainerConfig's
# data_transformer_ctor is mapped: the observation normaliser).
_NOT_HYPERPARAMETERS = ("TrainerConfig.", "create_environment.")
_MAPPED_TRAINER_BINDINGS = ("TrainerConfig.data_transformer_ctor",)


def _classes() -> dict[str, type]:
    """The ALF configurables whose settings the mapping reads, by name."""
    from alf.algorithms.bc import BcAlgorithm
    from alf.algorithms.cql import CqlAlgorithm
    from alf.algorithms.iql import IqlAlgorithm
    from alf.algorithms.td3bc import Td3BcAlgorithm
    from alf.networks import ActorDistributionNetwork, ActorNetwork, CriticNetwork, ValueNetwork

    classes = (
        BcAlgorithm,
        CqlAlgorithm,
        IqlAlgorithm,
        Td3BcAlgorithm,
        ActorDistributionNetwork,
        ActorNetwork,
        CriticNetwork,
        ValueNetwork,
    )
    return {cls.__name__: cls for cls in classes}


def _defaults(cls: type) -> dict[str, Any]:
    """Every keyword default of ``cls``'s constructors along its MRO (a subclass's
    default wins): what a parameter gets when the config binds none."""
    import inspect

    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = vars(klass).get("__init__")
        if init is None:
            continue
        for name, param in inspect.signature(init).parameters.items():
            if param.default is not inspect.Parameter.empty:
                found[name] = param.default
    return found


def _jsonable(value: Any) -> Any:
    """A gin value as JSON: a configurable reference as ``{"ref": scoped name,
    "params": its bound and default parameters}``, sequences as lists, classes and other
    objects as their names."""
    import gin

    if isinstance(value, gin.config.ConfigurableReference):
        selector = value.scoped_selector
        params = {k: _jsonable(v) for k, v in _defaults(value.configurable.wrapped).items()}
        import inspect

        for name in inspect.signature(value.configurable.wrapped).parameters:
            try:
                params[name] = _jsonable(gin.query_parameter(f"{selector}.{name}"))
            except ValueError:
                pass
        return {"ref": selector, "params": params}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return getattr(value, "__name__", repr(value))


def read_alf_settings(algo: str, conf_params: Sequence[str]) -> dict[str, Any]:
    """The settings ALF trains ``algo`` with (in a worker: it loads the config): every
    parameter of the algorithm and of its networks (bound, else the default), the
    observation normaliser, ALF's default Adam, and the list of bound names."""
    import gin
    import torch

    from alf import config
    from alf.algorithms.algorithm import default_optimizer
    from alf.configurables import import_configurables

    spec = ALGOS[algo]
    import_configurables()
    config.load_config(str(EXAMPLES / spec.conf), list(conf_params))
    classes = _classes()
    values: dict[str, Any] = {}
    for name in (spec.alf_class, *spec.networks):
        for param, default in _defaults(classes[name]).items():
            try:
                value = gin.query_parameter(f"{name}.{param}")
            except ValueError:
                value = default
            values[f"{name}.{param}"] = _jsonable(value)
    try:
        transformers = gin.query_parameter("TrainerConfig.data_transformer_ctor")
    except ValueError:
        transformers = ()
    values["TrainerConfig.data_transformer_ctor"] = _jsonable(list(transformers))
    adam = default_optimizer([torch.zeros(1, requires_grad=True)], 1e-3)
    values["default_optimizer"] = {
        "class": type(adam).__name__,
        "eps": adam.defaults["eps"],
        "betas": list(adam.defaults["betas"]),
        "weight_decay": adam.defaults["weight_decay"],
    }
    return {"values": values, "bound": sorted(config.current_bindings())}


# --------------------------------------------------------------------------- the mapping


class MappingError(ValueError):
    """An ALF setting that the d3rlpy runner cannot reproduce."""


class _Mapper:
    """Builds d3rlpy's settings from ALF's, recording each correspondence."""

    def __init__(self, values: dict[str, Any], steps: int) -> None:
        self.values = values
        self.steps = steps
        self.used: set[str] = set()
        self.rows: list[tuple[str, str, str, str]] = []
        self.fields: dict[str, Any] = {}
        self.encoders: dict[str, Any] = {}
        self.optimizers: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        self.used.add(name)
        value = self.values[name]
        if isinstance(value, dict) and "ref" in value:
            self.used.update(f"{value['ref']}.{p}" for p in value["params"])
        return value

    def row(self, alf: str, alf_value: Any, d3: str, d3_value: Any) -> None:
        self.rows.append((alf, _show(alf_value), d3, _show(d3_value)))

    def field(self, alf: str, d3: str, convert: Callable[[Any], Any] = lambda v: v) -> Any:
        """``d3 = convert(ALF's alf)``."""
        value = self.get(alf)
        self.fields[d3] = convert(value)
        self.row(alf, value, d3, self.fields[d3])
        return self.fields[d3]

    def require(self, alf: str, expected: Any, why: str) -> None:
        """ALF's ``alf`` must be ``expected`` (d3rlpy's fixed behaviour, ``why``)."""
        value = self.get(alf)
        if value != expected:
            raise MappingError(
                f"{alf} = {value!r}: d3rlpy has no setting for it ({why}); the benchmark "
                f"needs {expected!r}"
            )
        self.row(alf, value, "(fixed)", why)

    def encoder(self, network: str, d3: str) -> None:
        """A d3rlpy ``VectorEncoderFactory`` with the network's layers."""
        layers = self.get(f"{network}.fc_layer_params")
        activation = self.get(f"{network}.activation")
        for param in ("conv_layer_params", "input_preprocessors", "lstm_hidden_size"):
            if self.values.get(f"{network}.{param}") is not None:
                raise MappingError(f"{network}.{param} has no d3rlpy counterpart here")
            self.used.add(f"{network}.{param}")
        self.encoders[d3] = {"hidden_units": list(layers), "activation": activation}
        self.row(
            f"{network}.fc_layer_params, .activation",
            f"{tuple(layers)}, {activation}",
            f"{d3}",
            f"VectorEncoderFactory({list(layers)}, {activation!r})",
        )

    def optimizer(self, d3: str, cosine: bool = False) -> None:
        """A d3rlpy ``AdamFactory`` with the betas and eps of ALF's default Adam; with
        ``cosine`` a cosine annealing to 0 over the run (ALF's ``CosineSchedule``)."""
        adam = self.values["default_optimizer"]
        spec = {"eps": adam["eps"], "betas": adam["betas"]}
        if cosine:
            spec["cosine_t_max"] = self.steps
        self.optimizers[d3] = spec
        d3_value = f"AdamFactory(eps={adam['eps']:g}, betas={tuple(adam['betas'])}"
        d3_value += f", CosineAnnealingLR(T_max={self.steps}))" if cosine else ")"
        self.row("default_optimizer (optimizer_ctor None)", "fused Adam", d3, d3_value)

    def learning_rate(self, alf: str, d3: str) -> bool:
        """A learning rate: a number, or a ``CosineSchedule`` from ``start`` to 0 over the
        whole run (d3rlpy's ``CosineAnnealingLR`` with ``T_max`` the budget). Returns
        whether it was a cosine."""
        value = self.get(alf)
        if isinstance(value, dict):
            params = value["params"]
            if not value["ref"].endswith("CosineSchedule") or params.get("end", 0.0) != 0.0:
                raise MappingError(f"{alf} = {value}: only a CosineSchedule to 0 is mapped")
            if params.get("until", 1.0) != 1.0:
                raise MappingError(f"{alf}: CosineSchedule.until must be 1.0")
            self.fields[d3] = float(params["start"])
            self.row(alf, f"CosineSchedule(start={params['start']:g})", d3, self.fields[d3])
            return True
        self.fields[d3] = float(value)
        self.row(alf, value, d3, self.fields[d3])
        return False

    def observation_scaler(self) -> None:
        """ALF's ``ObservationNormalizer`` (the dataset's mean and std, no clipping) is
        d3rlpy's ``StandardObservationScaler``; no transformer, no scaler."""
        transformers = self.get("TrainerConfig.data_transformer_ctor")
        if not transformers:
            self.row("TrainerConfig.data_transformer_ctor", "[]", "observation_scaler", None)
            return
        names = [t["ref"] if isinstance(t, dict) else t for t in transformers]
        only = transformers[0] if len(transformers) == 1 else None
        if not (isinstance(only, dict) and only["ref"] == "ObservationNormalizer"):
            raise MappingError(f"data transformers {names}: only [ObservationNormalizer] is mapped")
        if only["params"].get("clip_value") is not None:
            raise MappingError("ObservationNormalizer.clip_value must be None (d3rlpy clips not)")
        self.used.update(f"ObservationNormalizer.{p}" for p in only["params"])
        self.extra["observation_scaler"] = "standard"
        self.row(
            "TrainerConfig.data_transformer_ctor",
            "[ObservationNormalizer] (clip None)",
            "observation_scaler",
            "StandardObservationScaler()",
        )

    def return_range(self, alf: str) -> None:
        """``return_range``: d3rlpy's ``ReturnBasedRewardScaler(multiplier)``."""
        value = self.get(alf)
        if value is not None:
            self.extra["reward_scaler_return_range"] = float(value)
        shown = None if value is None else f"ReturnBasedRewardScaler(multiplier={value:g})"
        self.row(alf, value, "reward_scaler", shown)

    def common(self, cls: str, *, target_period: bool = True) -> None:
        """The settings every algorithm here shares with d3rlpy's fixed behaviour."""
        self.field(f"{cls}.mini_batch_size", "batch_size")
        self.require(f"{cls}.mini_batch_length", 2, "one-step transitions")
        self.require(f"{cls}.num_updates_per_train_iter", 1, "one update per step")
        self.require(f"{cls}.max_grad_norm", None, "no gradient clipping")
        self.require(f"{cls}.optimizer_ctor", None, "Adam, see default_optimizer")
        self.used.update(
            f"{cls}.{p}"
            for p in (
                "burn_in",
                "replay_buffer_ctor",
                "actor_network_ctor",
                "critic_network_ctor",
                "value_network_ctor",
                "q_network_ctor",
                "distribution_network_ctor",
                "exploration_noise",
                "exploration_std",
                "ou_theta",
            )
        )
        if target_period:
            self.require(f"{cls}.target_update_period", 1, "targets follow every update")

    def q_learning(self, cls: str) -> None:
        """gamma, Polyak factor, critic count, reward scale."""
        self.field(f"{cls}.gamma", "gamma")
        self.field(f"{cls}.target_update_tau", "tau")
        self.field(f"{cls}.num_critic_replicas", "n_critics")
        self.require(f"{cls}.reward_scale", 1.0, "rewards as stored (or return_range's)")


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _map_iql(m: _Mapper) -> None:
    cls = "IqlAlgorithm"
    m.common(cls)
    m.q_learning(cls)
    m.field(f"{cls}.expectile", "expectile")
    m.field(f"{cls}.beta", "weight_temp")
    m.field(f"{cls}.max_weight", "max_weight")
    m.field(f"{cls}.learning_rate", "critic_learning_rate")  # critics and value
    actor_lr = f"{cls}.actor_learning_rate"
    if m.values[actor_lr] is None:
        m.get(actor_lr)
        m.field(f"{cls}.learning_rate", "actor_learning_rate")
        cosine = False
    else:
        cosine = m.learning_rate(actor_lr, "actor_learning_rate")
    m.return_range(f"{cls}.return_range")
    m.optimizer("actor_optim_factory", cosine=cosine)
    m.optimizer("critic_optim_factory")
    m.encoder("ActorDistributionNetwork", "actor_encoder_factory")
    m.encoder("CriticNetwork", "critic_encoder_factory")
    m.encoder("ValueNetwork", "value_encoder_factory")
    # IQL fixes these of its actor (a Normal with a state-independent std); d3rlpy's
    # NormalPolicy(use_std_parameter=True) is the same model.
    m.used.update(
        f"ActorDistributionNetwork.{p}"
        for p in ("state_dependent_std", "squash", "std_transform", "init_std", "min_std")
    )
    m.observation_scaler()


def _map_cql(m: _Mapper) -> None:
    cls = "CqlAlgorithm"
    m.common(cls)
    m.q_learning(cls)
    m.require(f"{cls}.encoder_ctor", None, "no shared encoder")
    m.field(f"{cls}.conservative_weight", "conservative_weight")
    m.field(f"{cls}.num_sampled_actions", "n_action_samples")
    m.field(f"{cls}.learning_rate", "critic_learning_rate")
    actor_lr = f"{cls}.actor_learning_rate"
    if m.values[actor_lr] is None:
        m.values = {**m.values, actor_lr: m.values[f"{cls}.learning_rate"]}
    if m.learning_rate(actor_lr, "actor_learning_rate"):
        raise MappingError(f"{actor_lr}: a schedule is not mapped for CQL")
    fixed = m.get(f"{cls}.fixed_alpha")
    m.fields["temp_learning_rate"] = 0.0 if fixed else m.fields["actor_learning_rate"]
    m.row(
        f"{actor_lr}, {cls}.fixed_alpha",
        f"..., {fixed}",
        "temp_learning_rate",
        m.fields["temp_learning_rate"],
    )
    m.field(f"{cls}.initial_alpha", "initial_temperature")
    m.require(f"{cls}.target_entropy", None, "-action_dim, as d3rlpy's SAC")
    m.field(f"{cls}.backup_entropy", "soft_q_backup")
    m.fields["max_q_backup"] = False
    threshold = m.get(f"{cls}.lagrange_threshold")
    if threshold is None:
        m.fields.update(alpha_learning_rate=0.0, initial_alpha=1.0)
        m.row(f"{cls}.lagrange_threshold", None, "alpha_learning_rate, initial_alpha", "0, 1")
    else:
        m.fields.update(
            alpha_threshold=float(threshold),
            alpha_learning_rate=m.fields["actor_learning_rate"],
            initial_alpha=1.0,
        )
        m.row(
            f"{cls}.lagrange_threshold",
            threshold,
            "alpha_threshold, alpha_learning_rate",
            f"{threshold}, {m.fields['actor_learning_rate']:g}",
        )
    m.return_range(f"{cls}.return_range")
    for name in (
        "actor_optim_factory",
        "critic_optim_factory",
        "temp_optim_factory",
        "alpha_optim_factory",
    ):
        m.optimizer(name)
    m.encoder("ActorDistributionNetwork", "actor_encoder_factory")
    m.encoder("CriticNetwork", "critic_encoder_factory")
    # SAC's actor: a tanh-squashed Normal with a state-dependent std, as d3rlpy's.
    m.used.update(
        f"ActorDistributionNetwork.{p}"
        for p in ("state_dependent_std", "squash", "std_transform", "init_std", "min_std")
    )
    m.observation_scaler()


def _map_td3bc(m: _Mapper) -> None:
    cls = "Td3BcAlgorithm"
    m.common(cls, target_period=False)
    m.q_learning(cls)
    m.field(f"{cls}.bc_alpha", "alpha")
    m.field(f"{cls}.learning_rate", "actor_learning_rate")
    m.field(f"{cls}.learning_rate", "critic_learning_rate")
    m.field(f"{cls}.target_policy_noise", "target_smoothing_sigma")
    m.field(f"{cls}.target_policy_noise_clip", "target_smoothing_clip")
    m.field(f"{cls}.actor_update_period", "update_actor_interval")
    m.optimizer("actor_optim_factory")
    m.optimizer("critic_optim_factory")
    m.encoder("ActorNetwork", "actor_encoder_factory")
    m.encoder("CriticNetwork", "critic_encoder_factory")
    m.observation_scaler()


def _map_bc(m: _Mapper) -> None:
    cls = "BcAlgorithm"
    m.common(cls, target_period=False)
    deterministic = (
        m.field(
            f"{cls}.deterministic", "policy_type", lambda d: "deterministic" if d else "stochastic"
        )
        == "deterministic"
    )
    m.field(f"{cls}.learning_rate", "learning_rate")
    m.optimizer("optim_factory")
    m.encoder("ActorNetwork" if deterministic else "ActorDistributionNetwork", "encoder_factory")
    networks = ("ActorNetwork.", "ActorDistributionNetwork.")
    m.used.update(k for k in m.values if k.startswith(networks))
    m.observation_scaler()


_MAPPERS: dict[str, Callable[[_Mapper], None]] = {
    "iql": _map_iql,
    "cql": _map_cql,
    "td3bc": _map_td3bc,
    "bc": _map_bc,
}


def d3rlpy_spec(algo: str, settings: dict[str, Any], steps: int) -> tuple[dict[str, Any], list]:
    """d3rlpy's settings for ``algo`` from ALF's (:func:`read_alf_settings`) and the
    table of correspondences ``(ALF setting, its value, d3rlpy field, its value)``.

    Raises:
        MappingError: a bound ALF setting that is not mapped, or a value d3rlpy cannot
            express.
    """
    mapper = _Mapper(settings["values"], steps)
    _MAPPERS[algo](mapper)
    unmapped = [
        name
        for name in settings["bound"]
        if name not in mapper.used
        and (not name.startswith(_NOT_HYPERPARAMETERS) or name in _MAPPED_TRAINER_BINDINGS)
    ]
    if unmapped:
        raise MappingError(
            f"{algo}: ALF's config binds {', '.join(unmapped)}, which the d3rlpy mapping "
            "does not carry over (add it to benchmarks/peers/offline.py's mapping)"
        )
    spec = {
        "config": ALGOS[algo].d3rlpy_config,
        "fields": mapper.fields,
        "encoders": mapper.encoders,
        "optimizers": mapper.optimizers,
        **mapper.extra,
    }
    return spec, mapper.rows


def alf_settings(algo: str, conf_params: Sequence[str]) -> dict[str, Any]:
    """:func:`read_alf_settings` in a fresh worker process (gin state stays there)."""
    argv = [str(Path(__file__).resolve()), f"--worker_settings={algo}"]
    argv += [f"--conf_param={p}" for p in conf_params]
    return run_worker(argv, timeout_s=600)


# --------------------------------------------------------------------------- the dataset


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A Minari-format dataset: its data folder and what its metadata says."""

    data_dir: str
    env_id: str | None
    action_low: list[float]
    action_high: list[float]
    random_return: float | None
    expert_return: float | None
    steps: int | None


def read_dataset(name: str) -> Dataset:
    """The dataset ``name`` (a directory, or an id in Minari's local path)."""
    from alf.datasets.minari_format import locate_dataset

    data_dir = locate_dataset(name)
    meta = json.loads((Path(data_dir) / "metadata.json").read_text())
    action_space = json.loads(meta["action_space"])
    if action_space.get("type") != "Box":
        raise SystemExit(f"{name}: the benchmark's algorithms need Box actions")
    env_spec = json.loads(meta["env_spec"]) if meta.get("env_spec") else {}
    shape = action_space["shape"]
    low, high = action_space["low"], action_space["high"]
    if not isinstance(low, list):
        low, high = [low] * math.prod(shape), [high] * math.prod(shape)
    return Dataset(
        data_dir=data_dir,
        env_id=env_spec.get("id"),
        action_low=[float(x) for x in low],
        action_high=[float(x) for x in high],
        random_return=meta.get("ref_min_score"),
        expert_return=meta.get("ref_max_score"),
        steps=meta.get("total_steps"),
    )


def normalized(dataset: Dataset, value: float | None) -> float | None:
    """D4RL's normalised score of a return, or None without references."""
    if value is None or dataset.random_return is None or dataset.expert_return is None:
        return None
    return 100.0 * (value - dataset.random_return) / (dataset.expert_return - dataset.random_return)


# --------------------------------------------------------------------------- the runs


def uptime() -> str:
    """The ``uptime`` line (the load averages)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


def _run(cmd: list[str], log: Path, cwd: Path, timeout_s: float) -> tuple[int, float]:
    """Runs ``cmd`` in a session of its own with one thread per library; returns the exit
    status and wall seconds (the whole group is killed after ``timeout_s``)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1")
    env["PYTHONPATH"] = str(REPO)
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rc = -9
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    return rc, time.monotonic() - start


@dataclasses.dataclass(frozen=True)
class RunSetup:
    """What every run of one benchmark shares."""

    dataset: Dataset
    env: str
    steps: int
    eval_interval: int
    eval_episodes: int
    conf_params: tuple[str, ...]
    root: Path
    python: str | None
    timeout_s: float


def run_alf(setup: RunSetup, algo: str, seed: int) -> dict[str, Any]:
    """One ALF run; its evaluations and update time from ``progress.jsonl``."""
    import shutil

    root = setup.root / algo / "alf" / f"seed{seed}"
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    dataset_dir = str(Path(setup.dataset.data_dir).parent)
    params = (
        f"create_environment.env_name={json.dumps(setup.env)}",
        f"TrainerConfig.offline_dataset={json.dumps(dataset_dir)}",
        f"TrainerConfig.num_iterations={setup.steps}",
        f"TrainerConfig.eval_interval={setup.eval_interval}",
        f"TrainerConfig.num_eval_episodes={setup.eval_episodes}",
        f"TrainerConfig.num_eval_environments={setup.eval_episodes}",
        f"TrainerConfig.summary_interval={min(1000, setup.eval_interval)}",
        f"TrainerConfig.checkpoint_interval={setup.steps}",
        f"TrainerConfig.random_seed={seed}",
        *setup.conf_params,
    )
    cmd = [
        sys.executable,
        "-m",
        "alf.bin.train",
        f"--conf={EXAMPLES / ALGOS[algo].conf}",
        f"--root_dir={root}",
        *[f"--conf_param={p}" for p in params],
    ]
    log = setup.root / algo / f"alf_seed{seed}.log"
    rc, wall = _run(cmd, log, REPO, setup.timeout_s)
    evaluations, train_s = [], None
    returns_by_step: dict[int, list[float]] = {}
    eval_file = root / "evaluations.jsonl"
    for line in eval_file.read_text().splitlines() if eval_file.exists() else []:
        record = json.loads(line)
        returns_by_step[record["iteration"]] = record["returns"]
    progress = root / "progress.jsonl"
    for line in progress.read_text().splitlines() if progress.exists() else []:
        record = json.loads(line)
        if record.get("train_time_s") is not None:
            train_s = record["train_time_s"]
        if "eval/average_return" in record:
            step = record["iteration"]
            evaluations.append(
                {
                    "step": step,
                    "average_return": record["eval/average_return"],
                    "returns": returns_by_step.get(step),
                    "train_s": record.get("train_time_s"),
                }
            )
    steps_done = evaluations[-1]["step"] if evaluations else 0
    return _summary("alf", algo, seed, rc, wall, steps_done, train_s, evaluations, log, setup)


def run_d3rlpy(setup: RunSetup, algo: str, seed: int, d3_spec: dict[str, Any]) -> dict[str, Any]:
    """One d3rlpy run in its venv; its ``result.json``."""
    import shutil

    assert setup.python is not None
    root = setup.root / algo / "d3rlpy" / f"seed{seed}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    spec = {
        "algo": algo,
        "seed": seed,
        "steps": setup.steps,
        "eval_interval": setup.eval_interval,
        "eval_episodes": setup.eval_episodes,
        "env": setup.env,
        "dataset_hdf5": str(Path(setup.dataset.data_dir) / "main_data.hdf5"),
        "action_low": setup.dataset.action_low,
        "action_high": setup.dataset.action_high,
        "torch_num_threads": 1,
        "d3rlpy": d3_spec,
    }
    (root / "spec.json").write_text(json.dumps(spec, indent=1))
    cmd = [setup.python, str(PEER), f"--spec={root / 'spec.json'}", f"--out={root}"]
    log = setup.root / algo / f"d3rlpy_seed{seed}.log"
    # d3rlpy writes its (empty, with the no-op logger) experiment folder into the cwd.
    rc, wall = _run(cmd, log, root, setup.timeout_s)
    result_file = root / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    evaluations = result.get("evaluations", [])
    steps_done = evaluations[-1]["step"] if evaluations else 0
    summary = _summary(
        "d3rlpy", algo, seed, rc, wall, steps_done, result.get("train_s"), evaluations, log, setup
    )
    summary["versions"] = result.get("versions")
    return summary


def _summary(
    framework: str,
    algo: str,
    seed: int,
    rc: int,
    wall: float,
    steps: int,
    train_s: float | None,
    evaluations: list[dict[str, Any]],
    log: Path,
    setup: RunSetup,
) -> dict[str, Any]:
    final = evaluations[-1]["average_return"] if evaluations else None
    return {
        "framework": framework,
        "algo": algo,
        "seed": seed,
        "returncode": rc,
        "complete": rc == 0 and steps == setup.steps,
        "steps": steps,
        "wall_s": round(wall, 1),
        "train_s": train_s,
        "updates_per_s": steps / train_s if train_s else None,
        "final_return": final,
        "final_normalized": normalized(setup.dataset, final),
        "curve": [(e["step"], e["average_return"]) for e in evaluations],
        "evaluations": evaluations,
        "log": str(log),
    }


# --------------------------------------------------------------------------- the report


def _iqm_cells(values: dict[str, list[float]]) -> dict[str, str]:
    """``IQM [low, high]`` per framework of its seeds' values."""
    from alf.experiments.stats import iqm_interval_estimates

    present = {k: v for k, v in values.items() if v}
    if not present:
        return {}
    est = iqm_interval_estimates(present)
    cells = {}
    for name, vals in present.items():
        cell = f"{est.point[name]:.1f}"
        cell += f" [{est.low[name]:.1f}, {est.high[name]:.1f}]" if len(vals) > 1 else " (1 seed)"
        cells[name] = cell
    cells["method"] = est.method
    return cells


def summarize(runs: list[dict[str, Any]], algos: Sequence[str]) -> tuple[dict[str, Any], str]:
    """Per algorithm: both frameworks' final returns (and normalised scores) as IQM with
    its interval, their updates/s and the ALF/d3rlpy ratio of each seed's pair."""
    summary: dict[str, Any] = {}
    rows = []
    method = ""
    for algo in algos:
        done = [r for r in runs if r["algo"] == algo and r["complete"]]
        by_fw = {fw: [r for r in done if r["framework"] == fw] for fw in FRAMEWORKS}
        finals = {fw: [r["final_return"] for r in rs] for fw, rs in by_fw.items()}
        scores = {
            fw: [r["final_normalized"] for r in rs if r["final_normalized"] is not None]
            for fw, rs in by_fw.items()
        }
        speed = {fw: [r["updates_per_s"] for r in rs] for fw, rs in by_fw.items()}
        pairs = []
        for r in by_fw["alf"]:
            peer = next((p for p in by_fw["d3rlpy"] if p["seed"] == r["seed"]), None)
            if peer and r["updates_per_s"] and peer["updates_per_s"]:
                pairs.append(r["updates_per_s"] / peer["updates_per_s"])
        ratio = math.exp(sum(map(math.log, pairs)) / len(pairs)) if pairs else None
        return_cells, score_cells = _iqm_cells(finals), _iqm_cells(scores)
        method = return_cells.get("method", method)
        summary[algo] = {
            "final_returns": finals,
            "normalized_scores": scores,
            "return_iqm_ci": {fw: return_cells.get(fw) for fw in FRAMEWORKS},
            "normalized_iqm_ci": {fw: score_cells.get(fw) for fw in FRAMEWORKS},
            "updates_per_s": speed,
            "alf_over_d3rlpy_updates_per_s": pairs,
            "alf_over_d3rlpy_geomean": ratio,
        }
        for fw in FRAMEWORKS:
            mean_speed = sum(speed[fw]) / len(speed[fw]) if speed[fw] else None
            rows.append(
                [
                    f"{algo} {fw}",
                    len(finals[fw]),
                    return_cells.get(fw, "-"),
                    score_cells.get(fw, "-"),
                    fmt_num(mean_speed, 1),
                    fmt_num(ratio, 2) if fw == "alf" else "",
                ]
            )
    header = [
        "algorithm",
        "seeds",
        "final return IQM [95% CI]",
        "normalised IQM [95% CI]",
        "updates/s (mean)",
        "ALF/d3rlpy updates/s",
    ]
    return summary, format_table(header, rows) + (f"\n{method}" if method else "")


def mapping_table(algo: str, rows: list[tuple[str, str, str, str]]) -> str:
    """The mapping as a Markdown table."""
    lines = [
        f"{algo} (ALF -> d3rlpy {ALGOS[algo].d3rlpy_config}):",
        "",
        "| ALF | value | d3rlpy | value |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{a}` | {av} | `{d}` | {dv} |" for a, av, d, dv in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def _cached(path: Path, steps: int) -> dict[str, Any] | None:
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    return result if result.get("complete") and result.get("steps") == steps else None


def main(argv: list[str] | None = None) -> None:
    """Parses the flags and runs the benchmark (or a hidden worker)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="tests/data/datasets/pendulum-sac-v0")
    parser.add_argument("--env", default=None, help="Gymnasium id (default: the dataset's)")
    parser.add_argument("--algos", default="iql,cql", help=f"comma list of {list(ALGOS)}")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=10_000, help="gradient steps per run")
    parser.add_argument("--eval_interval", type=int, default=2_000, help="steps per evaluation")
    parser.add_argument("--eval_episodes", type=int, default=10)
    parser.add_argument("--root_dir", default="/tmp/offline_bench")
    parser.add_argument("--venv", default=None, help="d3rlpy's venv (default: the peer's)")
    parser.add_argument(
        "--conf_param",
        action="append",
        default=[],
        help="an ALF binding for both frameworks (mapped to d3rlpy), e.g. "
        "CqlAlgorithm.conservative_weight=10.0; repeatable",
    )
    parser.add_argument("--frameworks", default="alf,d3rlpy", help="which to run")
    parser.add_argument("--timeout_s", type=float, default=48 * 3600, help="per run")
    parser.add_argument("--rerun", action="store_true", help="run again runs already done")
    parser.add_argument("--show_mapping", action="store_true", help="print the mapping, exit")
    parser.add_argument("--worker_settings", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker_settings:
        emit_result(read_alf_settings(args.worker_settings, args.conf_param))
        return
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    for algo in algos:
        if algo not in ALGOS:
            parser.error(f"unknown algorithm {algo!r}: one of {list(ALGOS)}")
    if args.steps % args.eval_interval:
        parser.error("--steps must be a multiple of --eval_interval")
    specs, mappings = {}, {}
    for algo in algos:
        settings = alf_settings(algo, args.conf_param)
        specs[algo], rows = d3rlpy_spec(algo, settings, args.steps)
        mappings[algo] = rows
    if args.show_mapping:
        print("\n\n".join(mapping_table(algo, mappings[algo]) for algo in algos))
        return

    from benchmarks.peers.d3rlpy_offline import DEFAULT_VENV, ensure_venv

    frameworks = [f for f in args.frameworks.split(",") if f]
    python = ensure_venv(args.venv or DEFAULT_VENV) if "d3rlpy" in frameworks else None
    dataset = read_dataset(args.dataset)
    env = args.env or dataset.env_id
    if not env:
        parser.error("the dataset names no environment: give --env")
    root = Path(args.root_dir).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    setup = RunSetup(
        dataset=dataset,
        env=env,
        steps=args.steps,
        eval_interval=args.eval_interval,
        eval_episodes=args.eval_episodes,
        conf_params=tuple(args.conf_param),
        root=root,
        python=python,
        timeout_s=args.timeout_s,
    )
    results: dict[str, Any] = {
        "machine": machine_info(("torch", "gymnasium", "numpy", "mujoco")),
        "uptime_start": uptime(),
        "dataset": dataclasses.asdict(dataset),
        "env": env,
        "steps": args.steps,
        "eval_interval": args.eval_interval,
        "eval_episodes": args.eval_episodes,
        "conf_params": args.conf_param,
        "d3rlpy_specs": specs,
        "mapping": mappings,
        "runs": [],
    }
    print(results["uptime_start"], flush=True)
    pair = 0
    for algo in algos:
        for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
            order = list(FRAMEWORKS) if pair % 2 == 0 else list(reversed(FRAMEWORKS))
            pair += 1
            for framework in order:
                if framework not in frameworks:
                    continue
                cache = root / algo / f"{framework}_seed{seed}.result.json"
                result = None if args.rerun else _cached(cache, args.steps)
                if result is None:
                    before = uptime()
                    if framework == "alf":
                        result = run_alf(setup, algo, seed)
                    else:
                        result = run_d3rlpy(setup, algo, seed, specs[algo])
                    result.update(uptime_before=before, uptime_after=uptime())
                    cache.write_text(json.dumps(result, indent=1))
                else:
                    result["cached"] = True
                results["runs"].append(result)
                print(
                    f"{algo} seed {seed} {framework}: rc {result['returncode']}, final return "
                    f"{fmt_num(result['final_return'], 1)}, "
                    f"{fmt_num(result['updates_per_s'], 1)} updates/s"
                    f"{' (cached)' if result.get('cached') else ''} | "
                    f"{result.get('uptime_after', '')}",
                    flush=True,
                )
    results["uptime_end"] = uptime()
    results["summary"], table = summarize(results["runs"], algos)
    print()
    print(table)
    print(f"uptime at the start: {results['uptime_start']}")
    print(f"uptime at the end:   {results['uptime_end']}")
    (root / "results.json").write_text(json.dumps(results, indent=1))
    print(f"raw numbers in {root / 'results.json'}")


if __name__ == "__main__":
    main()
