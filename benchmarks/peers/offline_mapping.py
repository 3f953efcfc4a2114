"""The hyperparameter mapping of :mod:`benchmarks.peers.offline`: ALF's offline
algorithms' settings, read from their example configs, mapped one by one onto d3rlpy
2.8.1's config fields (a binding without a mapping, or a value d3rlpy cannot express, is
refused: a changed config never runs against an unchanged peer unnoticed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "alf" / "examples"

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
    m.require(f"{cls}.squash_mean", True, "the actor's mean is tanh(mu), log-std in [-5, 2]")
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
    soft = m.field(f"{cls}.backup_entropy", "soft_q_backup")
    next_action = m.get(f"{cls}.next_action")
    if not soft and next_action != "mean":
        raise MappingError(
            f"{cls}.next_action = {next_action!r}: without the soft backup d3rlpy's CQL "
            "bootstraps from the policy's mean action; the benchmark needs 'mean' (or "
            f"{cls}.backup_entropy = True, d3rlpy's soft_q_backup)"
        )
    m.row(f"{cls}.next_action", next_action, "(target action)", "sample" if soft else "mean")
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
