"""Tests of alf.config: includes, --conf_param precedence, errors, unused bindings."""

import os

import gin
import pytest
import torch
from gin import config as _gin_config

from alf import config as alf_config
from alf.config import ConfigError, inoperative_bindings, load_config, operative_config_str
from alf.networks import ValueNetwork
from alf.tensor_specs import TensorSpec
from alf.utils.schedules import LinearSchedule


@pytest.fixture(autouse=True)
def _clear_gin():
    prefixes = list(_gin_config._LOCATION_PREFIXES)
    gin.clear_config()
    yield
    gin.clear_config()
    _gin_config._LOCATION_PREFIXES[:] = prefixes


@pytest.fixture
def conf_dir(tmp_path, monkeypatch):
    """A config tree: main.gin includes parts/net.gin (relative) and an example config;
    parts/net.gin includes lr.gin relative to itself. The cwd is elsewhere."""
    root = tmp_path / "confs"
    (root / "parts").mkdir(parents=True)
    (root / "parts" / "lr.gin").write_text("lr/LinearSchedule.end = 0.25\n")
    (root / "parts" / "net.gin").write_text(
        'include "lr.gin"\nValueNetwork.fc_layer_params = (7,)\nValueNetwork.activation = "relu"\n'
    )
    (root / "main.gin").write_text(
        'include "ppo_cart_pole.gin"\n'
        'include "parts/net.gin"\n'
        "PPOAlgorithm.gamma = 0.9\n"
        "create_environment.num_parallel_environments = 3\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return root


def test_example_config_exists():
    assert os.path.isfile(os.path.join(alf_config.EXAMPLES_DIR, "ppo_cart_pole.gin"))


def test_includes_relative_to_file_and_from_examples(conf_dir):
    load_config(str(conf_dir / "main.gin"))
    # From alf/examples/ppo_cart_pole.gin:
    assert gin.query_parameter("create_environment.env_name") == "CartPole-v1"
    assert gin.query_parameter("PPOAlgorithm.num_epochs") == 20
    # From parts/net.gin (relative to main.gin) and parts/lr.gin (relative to net.gin):
    assert gin.query_parameter("ValueNetwork.fc_layer_params") == (7,)
    assert gin.query_parameter("lr/LinearSchedule.end") == 0.25
    # main.gin's own bindings override the included example's.
    assert gin.query_parameter("PPOAlgorithm.gamma") == 0.9
    assert gin.query_parameter("create_environment.num_parallel_environments") == 3


def test_bindings_are_applied_to_configurables(conf_dir):
    load_config(str(conf_dir / "main.gin"))
    net = ValueNetwork(input_spec=TensorSpec((4,)))
    linears = [m for m in net.modules() if m.__class__.__name__ == "Linear"]
    assert [m.out_features for m in linears] == [7, 1]
    assert any(m.__class__.__name__ == "ReLU" for m in net.modules())
    with gin.config_scope("lr"):
        schedule = LinearSchedule()
    assert (schedule.start, schedule.end) == (1e-3, 0.25)


def test_nested_include_prefers_file_next_to_the_including_file(conf_dir):
    (conf_dir / "lr.gin").write_text("lr/LinearSchedule.end = 0.75\n")
    load_config(str(conf_dir / "main.gin"))
    assert gin.query_parameter("lr/LinearSchedule.end") == 0.25


def test_include_is_not_shadowed_by_the_working_directory(conf_dir):
    shadow = conf_dir.parent / "elsewhere" / "parts"
    shadow.mkdir()
    (shadow / "net.gin").write_text("ValueNetwork.fc_layer_params = (99,)\n")
    load_config(str(conf_dir / "main.gin"))
    assert gin.query_parameter("ValueNetwork.fc_layer_params") == (7,)


def test_conf_param_wins_over_the_file(conf_dir):
    load_config(
        str(conf_dir / "main.gin"),
        ["PPOAlgorithm.gamma = 0.5", "ValueNetwork.fc_layer_params = (3, 3)"],
    )
    assert gin.query_parameter("PPOAlgorithm.gamma") == 0.5
    assert gin.query_parameter("ValueNetwork.fc_layer_params") == (3, 3)
    assert gin.query_parameter("PPOAlgorithm.num_epochs") == 20


def test_load_config_clears_previous_bindings(conf_dir):
    load_config(str(conf_dir / "main.gin"))
    load_config(None, ["ValueNetwork.activation = 'elu'"])
    assert gin.query_parameter("ValueNetwork.activation") == "elu"
    with pytest.raises(ValueError):
        gin.query_parameter("PPOAlgorithm.gamma")


def test_missing_file_raises_config_error(tmp_path):
    missing = tmp_path / "nope.gin"
    with pytest.raises(ConfigError, match="nope.gin"):
        load_config(str(missing))


def test_missing_include_raises_config_error(tmp_path):
    conf = tmp_path / "main.gin"
    conf.write_text('PPOAlgorithm.gamma = 0.9\ninclude "not_there.gin"\n')
    with pytest.raises(ConfigError, match="not_there.gin") as info:
        load_config(str(conf))
    assert "line 2" in str(info.value)


def test_unknown_configurable_raises_config_error_naming_it(tmp_path):
    conf = tmp_path / "bad.gin"
    conf.write_text("ValueNetwork.activation = 'tanh'\nNoSuchThing.value = 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(conf))
    message = str(info.value)
    assert "NoSuchThing" in message
    assert "bad.gin" in message
    assert "line 2" in message


def test_unknown_parameter_raises_config_error_naming_it(tmp_path):
    conf = tmp_path / "bad.gin"
    conf.write_text("ValueNetwork.fc_layer_paramz = (3,)\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(conf))
    assert "fc_layer_paramz" in str(info.value)
    assert "ValueNetwork" in str(info.value)


def test_unknown_name_in_conf_param_raises_config_error():
    with pytest.raises(ConfigError, match="NoSuchThing"):
        load_config(None, ["NoSuchThing.x = 1"])
    with pytest.raises(ConfigError, match="bogus"):
        load_config(None, ["LinearSchedule.bogus = 1"])


def test_unknown_algorithm_parameter_raises_config_error_at_load():
    with pytest.raises(ConfigError, match="learning_rat"):
        load_config(None, ["PPOAlgorithm.learning_rat = 1e-3"])


def test_inoperative_bindings_lists_unused_bindings():
    load_config(
        None,
        [
            "ValueNetwork.fc_layer_params = (5,)",
            "create_environment.env_name = 'Pendulum-v1'",
            "lr/LinearSchedule.start = 0.5",
        ],
    )
    assert inoperative_bindings() == [
        "ValueNetwork.fc_layer_params",
        "create_environment.env_name",
        "lr/LinearSchedule.start",
    ]
    ValueNetwork(input_spec=TensorSpec((2,)))
    assert inoperative_bindings() == ["create_environment.env_name", "lr/LinearSchedule.start"]
    with gin.config_scope("lr"):
        LinearSchedule()
    assert inoperative_bindings() == ["create_environment.env_name"]
    assert "ValueNetwork.fc_layer_params = (5,)" in operative_config_str()


def test_torch_optimizers_are_configurable(tmp_path):
    from alf import config as alf_config
    from alf.algorithms import PPOAlgorithm
    from alf.environments import create_environment

    alf_config.load_config(
        None, ["PPOAlgorithm.optimizer_ctor = @torch.optim.AdamW", "AdamW.weight_decay = 0.1"]
    )
    env = create_environment("CartPole-v1", 1)
    algorithm = PPOAlgorithm(observation_spec=env.observation_spec(), action_spec=env.action_spec())
    assert isinstance(algorithm.optimizer, torch.optim.AdamW)
    assert algorithm.optimizer.param_groups[0]["weight_decay"] == 0.1


def test_misspelt_algorithm_parameter_is_located_and_suggested(tmp_path):
    from alf import config as alf_config

    conf = tmp_path / "typo.gin"
    conf.write_text('include "ppo_cart_pole.gin"\n\nPPOAlgorithm.gama = 0.9\n')
    with pytest.raises(alf_config.ConfigError) as err:
        alf_config.load_config(str(conf))
    message = str(err.value)
    assert "'gama'" in message and "Did you mean: gamma" in message
    assert f'In file "{conf}", line 3' in message
