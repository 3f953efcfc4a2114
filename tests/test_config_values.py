"""Bad configured values are refused before anything is built, each with one line naming
the binding, its value and what is allowed (issue 17): type checks of every bound value
at load time, range checks in the constructors, budgets, ``mini_batch_size``, misspelt
configurable names and gin syntax errors. Most cases run in-process; a few go through
``python -m alf.bin.train`` as a user meets them."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import gin
import pytest
from gin import config as _gin_config
from helpers_cli import CONF, REPO, assert_clean_user_error, error_lines, run_many, train_cmd

from alf import config as alf_config
from alf.algorithms import (
    ActorCriticAlgorithm,
    AppoAlgorithm,
    DdpgAlgorithm,
    DqnAlgorithm,
    PPOAlgorithm,
    SacAlgorithm,
    Td3Algorithm,
)
from alf.config import ConfigError, ConfigValueError, load_config
from alf.config_checks import ValueMismatchError, fit_value, parameter_hints
from alf.environments import create_environment
from alf.trainers import TrainerConfig

TRAIN = "alf.bin.train"
EXAMPLES = sorted((REPO / "alf" / "examples").glob("**/*.gin"))
SAVED_CONFIGS = sorted((REPO / "docs").glob("**/config.gin"))


def _error(bindings: list[str], conf: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(None if conf is None else str(conf), bindings)
    return str(info.value)


# ------------------------------------------------------------------ types at load time
@pytest.mark.parametrize(
    ("binding", "first_line"),
    [
        (
            "PPOAlgorithm.mini_batch_size=1.5",
            "PPOAlgorithm.mini_batch_size = 1.5 must be an int or None (got float)",
        ),
        (
            'TrainerConfig.num_env_steps="abc"',
            "TrainerConfig.num_env_steps = 'abc' must be an int or None (got str)",
        ),
        (
            "create_environment.num_parallel_environments=2.5",
            "create_environment.num_parallel_environments = 2.5 must be an int (got float)",
        ),
        (
            "SacAlgorithm.mini_batch_size=None",
            "SacAlgorithm.mini_batch_size = None must be an int (got None)",
        ),
        (
            "TrainerConfig.num_iterations=True",
            "TrainerConfig.num_iterations = True must be an int or None (got bool)",
        ),
        ("TrainerConfig.evaluate=1", "TrainerConfig.evaluate = 1 must be True or False (got int)"),
        (
            "TrainerConfig.unroll_length='8'",
            "TrainerConfig.unroll_length = '8' must be a number (got str; without the quotes "
            "it would be the number 8)",
        ),
        (
            'TrainerConfig.algorithm_ctor="PPOAlgorithm"',
            "TrainerConfig.algorithm_ctor = 'PPOAlgorithm' must be a callable (@Name) or None "
            "(got str)",
        ),
        (
            "ValueNetwork.fc_layer_params=(64, 1.5)",
            "ValueNetwork.fc_layer_params = (64, 1.5) must be a list or tuple of ints (got the "
            "item 1.5)",
        ),
        (
            "lr/LinearSchedule.start='fast'",
            "lr/LinearSchedule.start = 'fast' must be a number (got str)",
        ),
    ],
)
def test_value_of_the_wrong_type_is_refused_at_load(binding, first_line):
    message = _error([binding])
    lines = message.splitlines()
    assert lines[0] == f"invalid configuration: {first_line}"
    assert lines[1] == f"  In --conf_param: {binding}"


def test_wrong_type_in_a_file_is_located(tmp_path):
    conf = tmp_path / "mine.gin"
    conf.write_text(f'include "{CONF}"\n\nPPOAlgorithm.num_epochs = 2.5\n')
    message = _error([], conf)
    assert message.splitlines()[0] == (
        "invalid configuration: PPOAlgorithm.num_epochs = 2.5 must be an int (got float)"
    )
    assert f'In file "{conf}", line 3: PPOAlgorithm.num_epochs = 2.5' in message


def test_location_is_the_binding_that_holds(tmp_path):
    # ppo_cart_pole.gin binds PPOAlgorithm.mini_batch_size = 256 on line 15.
    conf = tmp_path / "mine.gin"
    conf.write_text(f'include "{CONF}"\nPPOAlgorithm.mini_batch_size = 0.5\n')
    assert f'In file "{conf}", line 2: PPOAlgorithm.mini_batch_size = 0.5' in _error([], conf)
    bindings = ["PPOAlgorithm.mini_batch_size=8", "PPOAlgorithm.mini_batch_size='8'"]
    assert _error(bindings, CONF).endswith(f"In --conf_param: {bindings[1]}")


def test_wrong_type_is_a_value_error_too():
    with pytest.raises(ValueError, match="num_epochs"):
        load_config(None, ["PPOAlgorithm.num_epochs='ten'"])


def test_integral_float_for_an_int_becomes_an_int():
    load_config(None, ["TrainerConfig.num_env_steps=1e6", "ValueNetwork.fc_layer_params=(8.0,)"])
    value = gin.query_parameter("TrainerConfig.num_env_steps")
    assert value == 1_000_000 and type(value) is int
    assert gin.query_parameter("ValueNetwork.fc_layer_params") == (8,)


def test_references_macros_and_numbers_for_floats_are_accepted():
    load_config(
        None,
        [
            "TrainerConfig.algorithm_ctor=@PPOAlgorithm",
            "TrainerConfig.data_transformer_ctor=[@ImageScale]",
            "TrainerConfig.unroll_length=8",  # an int for a float
            "PPOAlgorithm.learning_rate=@ConstantSchedule()",
            "ConstantSchedule.value=1e-3",
            "EPOCHS=4",
            "PPOAlgorithm.num_epochs=%EPOCHS",
            "PPOAlgorithm.mini_batch_size=None",
            "TrainerConfig.offline_buffer_dir=('a', 'b')",
        ],
    )


@pytest.mark.parametrize("conf", EXAMPLES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_example_config_passes_the_checks(conf):
    load_config(str(conf))
    if "common" not in conf.parts:
        TrainerConfig()


@pytest.mark.parametrize("conf", SAVED_CONFIGS, ids=lambda p: p.parent.name)
def test_saved_configs_of_real_runs_pass_the_checks(conf):
    alf_config.load_config_text(conf.read_text())
    TrainerConfig()


def _literal_defaults() -> list[tuple[str, object, object]]:
    """(name, hint, default) of every registered configurable's parameter whose default a
    config could write: the library's own defaults must fit its own hints."""
    cases = []
    for _, configurable in sorted(_gin_config._REGISTRY.items()):
        hints = parameter_hints(configurable.wrapped)
        functions = [configurable.wrapped]
        if inspect.isclass(configurable.wrapped):
            functions = [
                k.__init__ for k in configurable.wrapped.__mro__ if "__init__" in k.__dict__
            ]
        for function in functions:
            try:
                params = inspect.signature(inspect.unwrap(function)).parameters.values()
            except (TypeError, ValueError):
                continue
            for p in params:
                if p.name in hints and p.default is not p.empty:
                    if isinstance(
                        p.default, (int, float, str, bool, tuple, list, dict, type(None))
                    ):
                        cases.append((f"{configurable.name}.{p.name}", hints[p.name], p.default))
    return cases


def test_every_default_fits_its_own_hint():
    cases = _literal_defaults()
    assert len(cases) > 100
    misfits = []
    for name, hint, default in cases:
        try:
            fit_value(hint, default)
        except ValueMismatchError as err:
            misfits.append(f"{name} = {default!r}: {err}")
    assert not misfits, misfits


# ------------------------------------------------------------------ budgets
def test_none_budget_means_no_limit():
    config = TrainerConfig(algorithm_ctor=object, num_iterations=3, num_env_steps=None)
    assert config.num_env_steps == 0 and config.num_iterations == 3
    assert config.progress(iteration=1, env_steps=10**9) == pytest.approx(1 / 3)


@pytest.mark.parametrize("name", ["num_iterations", "num_env_steps"])
def test_negative_budget_is_refused_naming_it(name):
    with pytest.raises(ConfigValueError) as info:
        TrainerConfig(algorithm_ctor=object, **{"num_iterations": 3, name: -5})
    assert str(info.value).splitlines()[0] == (
        f"invalid configuration: TrainerConfig.{name} = -5 must be >= 0 (0 or None: no limit)"
    )


@pytest.mark.parametrize("budgets", [{}, {"num_iterations": None, "num_env_steps": 0}])
def test_no_budget_is_refused(budgets):
    with pytest.raises(ConfigValueError, match="no training budget: set TrainerConfig"):
        TrainerConfig(algorithm_ctor=object, **budgets)


def test_python_values_are_type_checked_too():
    with pytest.raises(ConfigValueError) as info:
        TrainerConfig(algorithm_ctor=object, num_env_steps="abc")
    assert str(info.value).startswith(
        "invalid configuration: TrainerConfig.num_env_steps = 'abc' must be an int or None"
    )


def test_range_error_of_a_bound_value_is_located():
    load_config(
        None, ["TrainerConfig.num_iterations=-1", "TrainerConfig.algorithm_ctor=@PPOAlgorithm"]
    )
    with pytest.raises(ConfigValueError) as info:
        TrainerConfig()
    lines = str(info.value).splitlines()
    assert lines[0] == (
        "invalid configuration: TrainerConfig.num_iterations = -1 must be >= 0 (0 or None: "
        "no limit)"
    )
    assert lines[1] == "  In --conf_param: TrainerConfig.num_iterations=-1"


# ------------------------------------------------------------------ mini_batch_size
@pytest.fixture(scope="module")
def specs() -> dict[str, tuple[object, object]]:
    result = {}
    for kind, env_name in (("discrete", "CartPole-v1"), ("continuous", "Pendulum-v1")):
        env = create_environment(env_name, 1)
        result[kind] = (env.observation_spec(), env.action_spec())
        env.close()
    return result


ON_POLICY = [PPOAlgorithm, AppoAlgorithm, ActorCriticAlgorithm]
OFF_POLICY = [
    (SacAlgorithm, "discrete"),
    (DqnAlgorithm, "discrete"),
    (Td3Algorithm, "continuous"),
    (DdpgAlgorithm, "continuous"),
]


def _build(cls: Callable[..., object], spec: tuple[object, object], **kwargs: object) -> object:
    return cls(observation_spec=spec[0], action_spec=spec[1], **kwargs)


@pytest.mark.parametrize("cls", ON_POLICY, ids=lambda c: c.__name__)
@pytest.mark.parametrize("size", [0, -4])
def test_on_policy_mini_batch_size_must_be_positive_or_none(specs, cls, size):
    with pytest.raises(ConfigValueError) as info:
        _build(cls, specs["discrete"], mini_batch_size=size)
    assert str(info.value).splitlines()[0] == (
        f"invalid configuration: {cls.__name__}.mini_batch_size = {size} must be an int >= 1, "
        "or None for the whole trajectory"
    )
    assert _build(cls, specs["discrete"], mini_batch_size=None).mini_batch_size is None


@pytest.mark.parametrize(("cls", "kind"), OFF_POLICY, ids=lambda c: getattr(c, "__name__", c))
@pytest.mark.parametrize("size", [0, None, 2.5])
def test_off_policy_mini_batch_size_must_be_positive(specs, cls, kind, size):
    with pytest.raises(ConfigValueError) as info:
        _build(cls, specs[kind], mini_batch_size=size)
    assert str(info.value).splitlines()[0] == (
        f"invalid configuration: {cls.__name__}.mini_batch_size = {size!r} must be an int >= 1"
    )


def test_constructor_range_error_names_the_binding_and_its_place(specs):
    load_config(None, ["PPOAlgorithm.num_epochs=0"])
    with pytest.raises(ConfigValueError) as info:
        _build(PPOAlgorithm, specs["discrete"])
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid configuration: PPOAlgorithm.num_epochs = 0 must be an int >= 1"
    assert lines[1] == "  In --conf_param: PPOAlgorithm.num_epochs=0"


# ------------------------------------------------------------------ names
@pytest.mark.parametrize(
    ("binding", "expected"),
    [
        ("PPOAlgo.num_epochs=3", "No configurable matching 'PPOAlgo'. Did you mean: PPOAlgorithm"),
        ("ppoalgorithm.num_epochs=3", "Did you mean: PPOAlgorithm?"),
        (
            "TrainerConfig.algorithm_ctor=@PPOAlgo",
            "No configurable matching reference '@PPOAlgo'. Did you mean: @PPOAlgorithm",
        ),
        ("lr/LinearSchedul.start=1.0", "Did you mean: LinearSchedule?"),
    ],
)
def test_misspelt_configurable_name_gets_close_matches(binding, expected):
    lines = _error([binding]).splitlines()
    assert lines[0].startswith("invalid configuration (--conf_param): ")
    assert expected in lines[0]
    assert lines[1:] == [f"  In --conf_param: {binding}"]


def test_misspelt_name_in_an_included_file_is_located(tmp_path):
    (tmp_path / "inner.gin").write_text("PPOAlgorithm.gamma = 0.9\nSacAlgoritm.gamma = 0.9\n")
    conf = tmp_path / "main.gin"
    conf.write_text('include "inner.gin"\n')
    message = _error([], conf)
    assert "Did you mean: SacAlgorithm?" in message.splitlines()[0]
    assert f'In file "{tmp_path / "inner.gin"}", line 2' in message


# ------------------------------------------------------------------ syntax errors
SYNTAX_ERRORS = [
    ("TrainerConfig.num_env_steps = (4096,\n", 1, "'(' opened on this line is never closed"),
    ("TrainerConfig.num_env_steps 4096\n", 1, "expected '=' after the parameter name"),
    (
        "create_environment.env_name = 'CartPole-v1\n",
        1,
        "a quoted string is not closed on this line (missing closing quote)",
    ),
    ("TrainerConfig.num_env_steps = 1..2\n", 1, "unexpected '.2' after the value"),
    ("TrainerConfig.num_env_steps = abc\n", 1, "'abc' is not a value: write a string in quotes"),
    (
        "ValueNetwork.fc_layer_params = [3, 4\nTrainerConfig.num_env_steps = 5\n",
        1,
        "'[' opened on this line is never closed",
    ),
    ('create_environment.env_name = """abc\n', 1, "a triple-quoted string starting on this"),
    ("include 5\n", 1, "include needs a file path in quotes"),
]


@pytest.mark.parametrize(("text", "line", "sentence"), SYNTAX_ERRORS)
def test_syntax_error_in_a_file_names_file_line_and_problem(tmp_path, text, line, sentence):
    conf = tmp_path / "broken.gin"
    conf.write_text("# my settings\n" + text)
    lines = _error([], conf).splitlines()
    assert lines[0].startswith(f"invalid configuration: {conf}, line {line + 1}: {sentence}")
    assert lines[1] == "  " + text.splitlines()[line - 1].strip()


@pytest.mark.parametrize(("text", "line", "sentence"), SYNTAX_ERRORS[:5])
def test_syntax_error_in_a_conf_param_names_the_binding(text, line, sentence):
    binding = text.strip()
    message = _error(["TrainerConfig.num_iterations = 2", binding])
    assert message.startswith(f"invalid configuration: --conf_param '{binding}': {sentence}")
    assert "\n" not in message


def test_syntax_error_in_an_included_file_names_that_file(tmp_path):
    (tmp_path / "inner.gin").write_text(
        "PPOAlgorithm.gamma = 0.9\nValueNetwork.fc_layer_params = (3,\n"
    )
    conf = tmp_path / "main.gin"
    conf.write_text('include "inner.gin"\n')
    message = _error([], conf)
    assert message.startswith(f"invalid configuration: {tmp_path / 'inner.gin'}, line 2: '('")


# ------------------------------------------------------------------ the command line
CLI_CASES = {
    "float_mini_batch_size": (
        ["PPOAlgorithm.mini_batch_size=1.5"],
        "PPOAlgorithm.mini_batch_size = 1.5 must be an int or None (got float)",
    ),
    "negative_budget": (
        ["TrainerConfig.num_env_steps=-5"],
        "TrainerConfig.num_env_steps = -5 must be >= 0 (0 or None: no limit)",
    ),
    "misspelt_class": (["PPOAlgo.num_epochs=3"], "Did you mean: PPOAlgorithm"),
    "syntax_error": ([], "line 3: '(' opened on this line is never closed"),
}


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("config_values")
    broken = tmp / "broken.gin"
    broken.write_text(f'include "{CONF}"\n\nTrainerConfig.num_env_steps = (4096,\n')
    cmds = {}
    for name, (params, _) in CLI_CASES.items():
        conf = broken if name == "syntax_error" else CONF
        cmds[name] = train_cmd(tmp / name / "root", *params, conf=conf)
    return tmp, run_many(cmds)


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_bad_value_on_the_command_line_is_one_line_and_status_2(cli_results, case):
    tmp, results = cli_results
    result = results[case]
    assert result.returncode == 2, result.stderr[-3000:]
    stderr = assert_clean_user_error(result, TRAIN)
    (line,) = error_lines(stderr, TRAIN)
    assert CLI_CASES[case][1] in line, stderr
    assert not (tmp / case / "root").exists(), "the run directory was created"
