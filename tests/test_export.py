"""``alf.bin.export``: tiny runs (MLP with an observation normaliser, Atari CNN with frame
stacking, LSTM) trained through the command line, exported to ONNX and TorchScript, and
the exported files run with onnxruntime and ``torch.jit.load`` on the observations of
episodes played by the greedy step ``play`` acts with (``greedy_step``): same actions,
same next states, step by step and all steps as one batch."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_cli import (
    REPO,
    assert_clean_user_error,
    run_many,
    train_cmd,
)

from alf.algorithms.policy import Policy, PolicyState
from alf.data_structures import StepType, TimeStep
from alf.export import PolicySignature, export_policy, named_leaves, read_signature
from alf.trainers.trained_run import load_trained_run

onnxruntime = pytest.importorskip("onnxruntime")

EXAMPLES = REPO / "alf" / "examples"
PROG = "alf.bin.export"
NO_EVAL = ("TrainerConfig.evaluate=False", "TrainerConfig.progress_interval_s=0")

RUNS = {
    # Two iterations of 8 envs x 32 steps, with a normaliser whose statistics must travel.
    "mlp": (
        "ppo_cart_pole.gin",
        "TrainerConfig.num_env_steps=512",
        "TrainerConfig.data_transformer_ctor=[@ObservationNormalizer]",
        "PPOAlgorithm.num_epochs=2",
    ),
    # One iteration of 8 envs x 32 steps: two 16-step sequences per environment.
    "lstm": (
        "ppo_lstm_cart_pole_masked.gin",
        "TrainerConfig.num_env_steps=256",
        "PPOAlgorithm.num_epochs=1",
    ),
    # Two iterations of 2 envs x 8 steps of Pong (uint8 frames, FrameStacker, ImageScale)
    # with a small convolutional torso.
    "cnn": (
        "ppo_pong.gin",
        "TrainerConfig.num_env_steps=32",
        "TrainerConfig.unroll_length=8",
        "create_environment.num_parallel_environments=2",
        "EncodingNetwork.conv_layer_params=((8, 8, 4), (8, 4, 2))",
        "ActorDistributionNetwork.fc_layer_params=(32,)",
        "ValueNetwork.fc_layer_params=(32,)",
        "PPOAlgorithm.mini_batch_size=16",
        "PPOAlgorithm.num_epochs=1",
    ),
}
# The format each run is exported to through the command line (the other one in-process),
# and the checkpoint it names: the newest, a copied checkpoint file, an iteration.
CLI_FORMAT = {"mlp": "onnx", "lstm": "torchscript", "cnn": "onnx"}
CLI_CHECKPOINT = {"mlp": None, "lstm": "copy", "cnn": "2"}
SUFFIX = {"onnx": ".onnx", "torchscript": ".pt"}
NUM_STEPS = 200
FORCED_FIRST_EVERY = 97  # a step made FIRST (both sides): state resets mid-stream too


def greedy_step(algorithm, time_step, state, transform_state):
    """One greedy step of ``algorithm``'s policy (what ``play`` and evaluation act with):
    ``(action, state, transform_state)``."""
    action, (state, transform_state) = Policy(algorithm=algorithm).greedy_step(
        time_step, PolicyState(algorithm=state, transform=transform_state)
    )
    return action, state, transform_state


def _have_atari() -> bool:
    return all(importlib.util.find_spec(m) for m in ("ale_py", "cv2", "envpool"))


def export_cmd(root: Path, fmt: str, out: Path, *flags: str) -> list[str]:
    """``python -m alf.bin.export`` of ``root``."""
    return [
        sys.executable,
        "-m",
        PROG,
        f"--root_dir={root}",
        f"--format={fmt}",
        f"--out={out}",
        *flags,
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:  # noqa: ANN001
    """The tiny runs, trained at once, then exported through the CLI."""
    tmp = tmp_path_factory.mktemp("export")
    names = [n for n in RUNS if n != "cnn" or _have_atari()]
    start = time.perf_counter()
    trained = run_many(
        {n: train_cmd(tmp / n, *NO_EVAL, *RUNS[n][1:], conf=EXAMPLES / RUNS[n][0]) for n in names},
        max_workers=len(names),
    )
    for name, proc in trained.items():
        assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
    cmds = {}
    for n in names:
        flags = []
        if CLI_CHECKPOINT[n] == "copy":  # a checkpoint file under another name
            copy = tmp / f"{n}-policy.ckpt"
            shutil.copy(tmp / n / "checkpoints" / "ckpt-1.pt", copy)
            flags.append(f"--checkpoint={copy}")
        elif CLI_CHECKPOINT[n] is not None:
            flags.append(f"--checkpoint={CLI_CHECKPOINT[n]}")
        out = tmp / "out" / f"{n}{SUFFIX[CLI_FORMAT[n]]}"
        cmds[n] = export_cmd(tmp / n, CLI_FORMAT[n], out, *flags)
    exported = run_many(cmds, max_workers=len(names))
    for name, proc in exported.items():
        assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
        assert f"wrote {CLI_FORMAT[name]} policy" in proc.stdout, proc.stdout
    print(f"trained and exported {names} in {time.perf_counter() - start:.1f} s")
    return {n: tmp / n for n in names}


def _cli_file(runs: dict[str, Path], name: str) -> Path:
    return runs[name].parent / "out" / f"{name}{SUFFIX[CLI_FORMAT[name]]}"


class _Exported:
    """An exported file run step by step, carrying its state outputs to its inputs."""

    def __init__(self, path: Path) -> None:
        self.signature: PolicySignature = read_signature(str(path))
        if path.suffix == ".onnx":
            session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            assert [i.name for i in session.get_inputs()] == self.signature.input_names
            assert [o.name for o in session.get_outputs()] == self.signature.output_names
            self._run = lambda feed: session.run(None, feed)
        else:
            module = torch.jit.load(str(path))
            names = self.signature.input_names

            def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
                with torch.no_grad():
                    out = module(*(torch.from_numpy(feed[n]) for n in names))
                return [t.numpy() for t in out]

            self._run = run
        state_inputs = {name for name, _ in self.signature.state_names}
        self.state = {
            t.name: np.zeros((1, *t.shape[1:]), dtype=getattr(np, t.dtype))
            for t in self.signature.inputs
            if t.name in state_inputs
        }

    def __call__(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by name; ``feed`` gets the state inputs."""
        feed.update(self.state)
        outputs = dict(zip(self.signature.output_names, self._run(feed), strict=True))
        self.state = {name: outputs[f"next_{name}"] for name in self.state}
        return outputs


def _check_against_play(runs: dict[str, Path], name: str, tmp_path: Path) -> dict[str, int]:
    """Exports run ``name`` to the format the CLI did not (timed), then plays
    ``NUM_STEPS`` steps with ``greedy_step`` (what ``play`` acts with) and checks that
    both exported files give the same actions and states, one step at a time and for all
    steps as one batch. Returns counts of the steps (``first``, ``last``)."""
    if name not in runs:
        pytest.skip("needs the [atari] and [envpool] extras")
    cli_format = CLI_FORMAT[name]
    other = "torchscript" if cli_format == "onnx" else "onnx"
    cli_file = _cli_file(runs, name)
    env, algorithm = load_trained_run(str(runs[name]), seed=0)
    try:
        result = export_policy(algorithm, str(tmp_path / f"{name}{SUFFIX[other]}"), format=other)
        print(f"{name}: {other} export took {result.seconds:.3f} s")
        algorithm.eval()
        exported = [_Exported(cli_file), _Exported(Path(result.path))]
        for model in exported:
            assert model.signature == result.signature
        state = algorithm.zero_state(algorithm.predict_state_spec, 1)
        transform_state = algorithm.data_transformer.initial_state(1)
        feeds: list[dict[str, np.ndarray]] = []
        actions = []
        counts = {"last": 0, "first": 0}
        time_step = env.reset()
        for i in range(NUM_STEPS):
            if i % FORCED_FIRST_EVERY == FORCED_FIRST_EVERY - 1:
                time_step = time_step._replace(step_type=torch.full_like(time_step.step_type, 0))
            counts["first"] += int(time_step.step_type[0] == StepType.FIRST)
            counts["last"] += int(time_step.step_type[0] == StepType.LAST)
            with torch.no_grad():
                action, state, transform_state = greedy_step(
                    algorithm, time_step, state, transform_state
                )
            expected_states = {
                **dict(named_leaves("next_policy_state", state)),
                **dict(named_leaves("next_transform_state", transform_state)),
            }
            base = {"step_type": time_step.step_type.numpy().astype(np.int32)}
            base.update(
                (n, x.numpy()) for n, x in named_leaves("observation", time_step.observation)
            )
            for model in exported:
                feed = dict(base)
                outputs = model(feed)
                assert np.array_equal(outputs["action"], action.numpy()), (i, model.signature)
                for key, value in expected_states.items():
                    np.testing.assert_allclose(outputs[key], value.numpy(), atol=1e-5, err_msg=key)
                feeds.append(feed)
            actions.append(action.numpy())
            time_step = env.step(action)
    finally:
        env.close()
    # All steps at once: a batch of NUM_STEPS independent rows (each with its own state).
    expected = np.concatenate(actions)
    for k, model in enumerate(exported):
        rows = feeds[k :: len(exported)]
        batch = {n: np.concatenate([f[n] for f in rows]) for n in model.signature.input_names}
        model.state = {n: batch[n] for n in model.state}
        assert np.array_equal(model(batch)["action"], expected)
    return counts


def test_mlp_policy_with_normalizer_exports_play_actions(runs, tmp_path):
    counts = _check_against_play(runs, "mlp", tmp_path)
    signature = read_signature(str(_cli_file(runs, "mlp")))
    assert signature.input_names == ["step_type", "observation"]
    assert signature.output_names == ["action"]
    assert counts["first"] >= 3  # episode starts (real and forced)


def test_lstm_policy_carries_its_state_through_episodes(runs, tmp_path):
    counts = _check_against_play(runs, "lstm", tmp_path)
    signature = read_signature(str(_cli_file(runs, "lstm")))
    assert signature.input_names == [
        "step_type",
        "observation",
        "policy_state.0.0",
        "policy_state.0.1",
    ]
    assert [t.shape for t in signature.inputs[2:]] == [("batch", 64)] * 2
    assert signature.output_names == ["action", "next_policy_state.0.0", "next_policy_state.0.1"]
    assert counts["last"] >= 3  # several episodes, the state carried across them


def test_cnn_policy_with_frame_stacking_exports_play_actions(runs, tmp_path):
    counts = _check_against_play(runs, "cnn", tmp_path)
    signature = read_signature(str(_cli_file(runs, "cnn")))
    assert [(t.name, t.shape, t.dtype) for t in signature.inputs] == [
        ("step_type", ("batch",), "int32"),
        ("observation", ("batch", 1, 84, 84), "uint8"),
        ("transform_state.0", ("batch", 3, 1, 84, 84), "uint8"),
    ]
    assert counts["first"] >= 3  # the stacked frames restart at each (forced) FIRST


def test_bad_input_is_one_clear_line(runs, tmp_path):
    no_checkpoints = tmp_path / "fresh"
    no_checkpoints.mkdir()
    (no_checkpoints / "config.gin").write_text((runs["mlp"] / "config.gin").read_text())
    out = tmp_path / "policy.onnx"
    results = run_many(
        {
            "no_checkpoint": export_cmd(no_checkpoints, "onnx", out),
            "no_root": export_cmd(tmp_path / "nowhere", "onnx", out),
            "format": export_cmd(runs["mlp"], "tflite", out),
        },
        max_workers=3,
    )
    assert_clean_user_error(results["no_checkpoint"], PROG, "no checkpoint", str(no_checkpoints))
    assert_clean_user_error(results["no_root"], PROG, "nowhere", "does not exist")
    assert_clean_user_error(results["format"], PROG, "tflite", "onnx", "torchscript")
    assert all(r.returncode == 2 for r in results.values())
    assert not out.exists()


def test_missing_flags_and_unwritable_out_are_one_clear_line(tmp_path):
    (tmp_path / "a_file").write_text("")
    results = run_many(
        {
            "no_out": export_cmd(tmp_path, "onnx", tmp_path / "p.onnx")[:-1],
            "under_file": export_cmd(tmp_path, "onnx", tmp_path / "a_file" / "p.onnx"),
            "directory": export_cmd(tmp_path, "onnx", tmp_path),
        },
        max_workers=3,
        timeout=120,
    )
    assert_clean_user_error(results["no_out"], PROG, "--out is required")
    assert_clean_user_error(results["under_file"], PROG, "a_file' is not a directory")
    assert_clean_user_error(results["directory"], PROG, "is a directory")


def test_nested_observation_with_normalizer_stacker_and_lstm_in_process(tmp_path):
    """A Dict observation (a float vector and a bool ``door_open`` the networks do not
    read) through an ObservationNormalizer with non-trivial statistics and a
    FrameStacker, into an LSTM actor: every leaf is an input of its own (the unread one
    too), and both formats match ``greedy_step`` over random episodes of 3 environments."""
    import functools

    from alf.algorithms import PPOAlgorithm
    from alf.algorithms.factory import make_algorithm
    from alf.data_transformers import FrameStacker, ObservationNormalizer
    from alf.networks import ActorDistributionNetwork, ValueNetwork
    from alf.tensor_specs import BoundedTensorSpec, TensorSpec

    torch.manual_seed(0)
    observation_spec = {
        "door_open": TensorSpec((4,), torch.bool),
        "position": TensorSpec((3,), torch.float32),
    }
    algorithm = make_algorithm(
        observation_spec=observation_spec,
        action_spec=BoundedTensorSpec((), torch.int64, minimum=0, maximum=3),
        algorithm_ctor=functools.partial(
            PPOAlgorithm,
            actor_network_ctor=functools.partial(
                ActorDistributionNetwork, fc_layer_params=(8,), lstm_hidden_size=6
            ),
            value_network_ctor=functools.partial(ValueNetwork, fc_layer_params=(8,)),
        ),
        data_transformer_ctor=[
            functools.partial(ObservationNormalizer, clip_value=2.0),
            functools.partial(FrameStacker, stack_size=2),
        ],
    )
    stats = algorithm.data_transformer.transformers[0].stats[0]
    stats.mean.copy_(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
    stats.var.copy_(torch.tensor([4.0, 0.25, 1.0], dtype=torch.float64))
    files = [
        export_policy(algorithm, str(tmp_path / f"p{SUFFIX[f]}"), format=f).path for f in SUFFIX
    ]
    signature = read_signature(files[0])
    assert signature.input_names == [
        "step_type",
        "observation.door_open",
        "observation.position",
        "policy_state.0.0",
        "policy_state.0.1",
        "transform_state.1.door_open",
        "transform_state.1.position",
    ]
    assert signature.inputs[1].dtype == "bool" and signature.inputs[5].shape == ("batch", 1, 4)
    models = [_Exported(Path(f)) for f in files]
    for model in models:
        model.state = {n: np.repeat(v, 3, axis=0) for n, v in model.state.items()}
    algorithm.eval()
    state = algorithm.zero_state(algorithm.predict_state_spec, 3)
    transform_state = algorithm.data_transformer.initial_state(3)
    generator = torch.Generator().manual_seed(1)
    for t in range(40):
        first = torch.rand(3, generator=generator) < 0.15 if t else torch.ones(3, dtype=torch.bool)
        observation = {
            "door_open": torch.rand(3, 4, generator=generator) < 0.7,
            "position": torch.randn(3, 3, generator=generator) * 3,
        }
        time_step = TimeStep(
            step_type=torch.where(first, StepType.FIRST, StepType.MID).to(torch.int32),
            reward=torch.zeros(3),
            discount=torch.ones(3),
            observation=observation,
            prev_action=torch.zeros(3, dtype=torch.int64),
            env_id=torch.arange(3),
        )
        with torch.no_grad():
            action, state, transform_state = greedy_step(
                algorithm, time_step, state, transform_state
            )
        for model in models:
            feed = {"step_type": time_step.step_type.numpy()}
            feed.update((n, x.numpy()) for n, x in named_leaves("observation", observation))
            outputs = model(feed)
            assert np.array_equal(outputs["action"], action.numpy()), t
            np.testing.assert_allclose(
                outputs["next_policy_state.0.1"], state[0][1].numpy(), atol=1e-5
            )


def test_masked_policy_exports_play_actions_and_never_a_masked_one(tmp_path):
    """PPO on ALF's MaskedChoice env: the mask is an input of the exported policy, whose
    greedy actions equal ``greedy_step``'s and are always allowed by the mask."""
    import functools

    from alf.algorithms import PPOAlgorithm
    from alf.algorithms.factory import make_algorithm
    from alf.environments import create_environment
    from alf.networks import ActorDistributionNetwork, ValueNetwork

    torch.manual_seed(0)
    env = create_environment(env_name="alf/MaskedChoice-v0", num_parallel_environments=4, seed=0)
    try:
        algorithm = make_algorithm(
            observation_spec=env.observation_spec(),
            action_spec=env.action_spec(),
            algorithm_ctor=functools.partial(
                PPOAlgorithm,
                actor_network_ctor=functools.partial(
                    ActorDistributionNetwork, fc_layer_params=(8,)
                ),
                value_network_ctor=functools.partial(ValueNetwork, fc_layer_params=(8,)),
            ),
        )
        files = [
            export_policy(algorithm, str(tmp_path / f"m{SUFFIX[f]}"), format=f).path for f in SUFFIX
        ]
        assert "observation.action_mask" in read_signature(files[0]).input_names
        models = [_Exported(Path(f)) for f in files]
        algorithm.eval()
        state = algorithm.zero_state(algorithm.predict_state_spec, 4)
        transform_state = algorithm.data_transformer.initial_state(4)
        time_step = env.reset()
        masked_rows = 0
        for t in range(100):
            mask = time_step.observation["action_mask"]
            masked_rows += int((~mask).any(-1).sum())
            with torch.no_grad():
                action, state, transform_state = greedy_step(
                    algorithm, time_step, state, transform_state
                )
            allowed = mask.gather(-1, (action - env.action_spec().minimum).long().unsqueeze(-1))
            assert allowed.all(), (t, mask, action)
            for model in models:
                feed = {"step_type": time_step.step_type.numpy().astype(np.int32)}
                feed.update(
                    (n, x.numpy()) for n, x in named_leaves("observation", time_step.observation)
                )
                assert np.array_equal(model(feed)["action"], action.numpy()), t
            time_step = env.step(action)
        assert masked_rows > 0, "the environment never masked an action"
    finally:
        env.close()
