r"""Writes an offline-RL dataset in Minari's format, or pins a run's checkpoint.

Usage::

    python -m alf.bin.dataset --root_dir=RUN --out=DIR (--num_steps=N | --num_episodes=N) \
        [--checkpoint=N|FILE] [--exploring] [--noise=X] [--seed=S] \
        [--random_return=R] [--expert_return=R] [--measure_references] [--dataset_id=ID]
    python -m alf.bin.dataset --random (--root_dir=RUN | --env_name=ID) --out=DIR ...
    python -m alf.bin.dataset --from_replay_buffer --root_dir=RUN --out=DIR [--num_steps=N]
    python -m alf.bin.dataset --from_datasets=DIR,DIR --out=DIR
    python -m alf.bin.dataset --root_dir=RUN --pin=N

Sources of the episodes (one environment, ``--seed``):

* a run's policy (the default): the run's ``config.gin`` rebuilds its environment and
  algorithm, the newest checkpoint (or ``--checkpoint``, an iteration or a file, as
  ``alf.bin.play`` takes) its parameters; actions are greedy (``predict_step``), or with
  ``--exploring`` sampled as in training (``rollout_step``). ``--noise=X`` adds Gaussian
  noise of standard deviation X half-ranges to continuous actions (clipped to the
  bounds), or takes a uniformly random discrete action with probability X.
* ``--random``: uniformly random actions, in the run's environment or ``--env_name``'s.
* ``--from_replay_buffer``: the replay buffer saved in the run's newest checkpoint (or
  ``--checkpoint``'s; trained with ``ReplayBuffer.enable_checkpoint=True``);
  ``--num_steps=N`` keeps the first N transitions stored (D4RL's "medium-replay" when
  the buffer has not wrapped).
* ``--from_datasets=A,B``: the episodes of existing datasets, concatenated (e.g. D4RL's
  "medium-expert"); the references are the first dataset's unless given.

``--num_steps`` counts transitions (the last episode is cut there, as a truncation);
``--num_episodes`` whole episodes. The dataset records the environment's id and spaces,
how it was made, and the reference returns of D4RL's normalised score: ``--random_return``
and ``--expert_return``, or with ``--measure_references`` the average over
``--reference_episodes`` episodes of a uniformly random policy and of the greedy policy
of ``--expert_checkpoint`` (default: the run's newest checkpoint). An existing ``--out``
is never overwritten; the dataset is written to ``DIR.tmp-<pid>`` and renamed when
complete. ``--pin=N`` pins checkpoint N of the run so rotation never removes it. Exit
status: 0, or 2 for bad input (one line naming it; nothing written).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from alf.bin.cli import (
    ToolParser,
    add_saved_run_arguments,
    exit_on_user_code_failure,
    print_error,
    use_plain_log_lines,
)

_TOOL = "alf.bin.dataset"


def build_parser() -> ToolParser:
    """The command line of ``alf.bin.dataset``."""
    parser = ToolParser(module=_TOOL, doc=__doc__, takes_bindings=True)
    add = parser.add_argument
    add("--root_dir", help="directory of a training run")
    add("--out", help="the dataset directory to write (must not exist)")
    add("--num_steps", type=int, help="transitions to write")
    add("--num_episodes", type=int, help="whole episodes to write")
    add("--checkpoint", help="iteration of the run's checkpoint, or a checkpoint file")
    add("--random", action="store_true", help="uniformly random actions")
    add("--env_name", help="the environment of --random without a run")
    add("--exploring", action="store_true", help="the policy's rollout_step (sampling)")
    add("--noise", type=float, default=0.0, help="Gaussian std in half ranges, or epsilon")
    add("--from_replay_buffer", action="store_true", help="the run's saved replay buffer")
    add("--from_datasets", help="comma-separated datasets to concatenate")
    add("--seed", type=int, default=0, help="seed of the environment and of the noise")
    add("--random_return", type=float, help="a uniformly random policy's average return")
    add("--expert_return", type=float, help="an expert policy's average return")
    add("--measure_references", action="store_true", help="measure the missing references")
    add("--reference_episodes", type=int, default=10, help="episodes per measured reference")
    add("--expert_checkpoint", help="the expert's checkpoint (default: the run's newest)")
    add("--dataset_id", help="Minari's id of the dataset (default: alf/<out name>-v0)")
    add("--pin", type=int, metavar="N", help="pin the run's checkpoint N, and exit")
    add_saved_run_arguments(parser)
    return parser


def _fail(message: str) -> None:
    sys.exit(print_error(_TOOL, message))


def _checkpoint_flag(text: str | None) -> int | str | None:
    if text is None or not text.strip().isdigit():
        return text
    return int(text)


def _source(args: argparse.Namespace) -> str:
    """Which source the flags ask for; one error line for flags that do not fit it."""
    chosen = [
        name
        for name, on in (
            ("--random", args.random),
            ("--from_replay_buffer", args.from_replay_buffer),
            ("--from_datasets", bool(args.from_datasets)),
        )
        if on
    ]
    if len(chosen) > 1:
        _fail(f"{chosen[0]} and {chosen[1]} are two sources: give one")
    source = chosen[0] if chosen else "policy"
    if source != "policy" and args.exploring:
        _fail(f"--exploring chooses how the run's policy acts, not {source}'s data")
    if source in ("--random", "--from_datasets") and args.checkpoint is not None:
        _fail(f"--checkpoint chooses the run's policy or replay buffer, not {source}'s data")
    if source in ("--from_replay_buffer", "--from_datasets") and args.noise:
        _fail(f"--noise acts on played actions, not on {source}'s data")
    if source in ("policy", "--from_replay_buffer") and not args.root_dir:
        _fail(f"{'--from_replay_buffer' if source != 'policy' else 'the policy'} needs --root_dir")
    if source == "--random" and not (args.root_dir or args.env_name):
        _fail("--random needs --root_dir or --env_name (the environment)")
    if args.env_name and source != "--random":
        _fail("--env_name is the environment of --random (other sources use the run's)")
    return source


def _check_flags(args: argparse.Namespace) -> str:
    """The checked flags' source (one error line, exit 2, for bad flags)."""
    for name in ("root_dir", "out"):
        value = getattr(args, name)
        setattr(args, name, os.path.abspath(os.path.expanduser(value)) if value else None)
    if args.pin is not None:
        if not args.root_dir:
            _fail("--pin needs --root_dir")
        return "pin"
    if not args.out:
        _fail("--out is required (the dataset directory to write)")
    if os.path.lexists(args.out):
        _fail(f"--out '{args.out}' exists: a dataset is never overwritten")
    source = _source(args)
    if args.num_steps is not None and args.num_episodes is not None:
        _fail("give --num_steps or --num_episodes, not both")
    counted = args.num_steps is not None or args.num_episodes is not None
    if source in ("policy", "--random") and not counted:
        _fail("--num_steps or --num_episodes is required (how much to play)")
    if source == "--from_datasets" and counted:
        _fail("--from_datasets copies whole datasets: no --num_steps or --num_episodes")
    if source == "--from_replay_buffer" and args.num_episodes is not None:
        _fail("--from_replay_buffer takes --num_steps (the first transitions stored)")
    for name in ("num_steps", "num_episodes", "reference_episodes"):
        value = getattr(args, name)
        if value is not None and value < 1:
            _fail(f"--{name} must be >= 1, got {value}")
    if not (math.isfinite(args.noise) and args.noise >= 0):
        _fail(f"--noise must be >= 0, got {args.noise}")
    for name in ("random_return", "expert_return"):
        value = getattr(args, name)
        if value is not None and not math.isfinite(value):
            _fail(f"--{name} must be a finite number, got {value}")
    if args.measure_references and source == "--from_datasets":
        _fail("--measure_references needs a run or an environment, not --from_datasets")
    return source


def main(argv: Sequence[str] | None = None) -> None:
    """Writes the dataset (or pins a checkpoint); see the module docstring."""
    args = build_parser().parse(argv)
    source = _check_flags(args)
    use_plain_log_lines()
    import gymnasium

    from alf.errors import AlfError

    try:
        if source == "pin":
            _pin(args)
            return
        summary = _make(args, source)
    except AlfError as err:
        sys.exit(print_error(_TOOL, str(err), err.exit_code))
    except (gymnasium.error.Error, ValueError, TypeError, RuntimeError, KeyError) as err:
        exit_on_user_code_failure(err, _TOOL, "while the dataset was being made")
        _fail(f"{type(err).__name__}: {err}")
    print(summary, flush=True)


def _pin(args: argparse.Namespace) -> None:
    from alf.run_dir.checkpoints import pin_checkpoint

    path = pin_checkpoint(args.root_dir, args.pin)
    print(f"{_TOOL}: pinned {path}: rotation never removes it", flush=True)


def _make(args: argparse.Namespace, source: str) -> str:
    """Makes and writes the dataset; returns the summary line."""
    from alf.configurables import import_configurables

    import_configurables()
    if source == "--from_datasets":
        return _concatenate(args)
    from alf.trainers import dataset_maker as maker

    loaded = None
    if source == "--random":
        env = maker.run_environment(
            args.root_dir,
            env_name=args.env_name,
            seed=args.seed,
            conf_params=args.conf_param,
            trusted_modules=args.trust_module,
        )
    else:
        env, loaded = _load_run(args, args.checkpoint)
    try:
        episodes, made_by = _episodes(args, source, env, loaded)
        # The references are measured after the dataset is played, which stays the same
        # with or without them.
        return _write(args, env, episodes, made_by, lambda: _references(args, env))
    finally:
        env.close()


def _load_run(args: argparse.Namespace, checkpoint: Any) -> tuple[Any, Any]:
    """The run's environment and algorithm with ``checkpoint``'s parameters, and the
    checkpoint itself: ``(env, (algorithm, checkpoint))``."""
    from alf.run_dir.checkpoints import read_run_checkpoint
    from alf.trainers.trained_run import load_trained_run

    run_checkpoint = read_run_checkpoint(args.root_dir, _checkpoint_flag(checkpoint))
    env, algorithm = load_trained_run(
        args.root_dir,
        checkpoint=run_checkpoint,
        seed=args.seed,
        conf_params=args.conf_param,
        trusted_modules=args.trust_module,
    )
    return env, (algorithm, run_checkpoint)


def _episodes(
    args: argparse.Namespace, source: str, env: Any, loaded: Any
) -> tuple[Iterable[Any], dict[str, Any]]:
    """The episodes of ``source`` and the record of how they were made."""
    import torch

    from alf.algorithms.policy import Policy
    from alf.datasets import DatasetError
    from alf.trainers import TrainerConfig
    from alf.trainers import dataset_maker as maker

    made_by: dict[str, Any] = {"seed": args.seed, "root_dir": args.root_dir}
    if loaded is not None:
        _, checkpoint = loaded
        made_by.update(
            checkpoint=checkpoint.path,
            iteration=checkpoint.iteration,
            env_steps=checkpoint.env_steps,
        )
    if source == "--from_replay_buffer":
        algorithm, checkpoint = loaded
        if checkpoint.data is None:
            raise DatasetError(
                f"checkpoint '{checkpoint.path}' holds no replay buffer: train the run with "
                "ReplayBuffer.enable_checkpoint=True"
            )
        episodes = maker.replay_buffer_episodes(
            checkpoint.data,
            observation_spec=env.observation_spec(),
            action_spec=env.action_spec(),
            num_steps=args.num_steps,
        )
        made_by.update(source="replay_buffer", policy="replay_buffer", num_steps=args.num_steps)
        return episodes, made_by
    torch.manual_seed(args.seed)
    if source == "--random":
        choose = maker.random_chooser(env.action_spec())
        made_by.update(source="random", policy="random")
    else:
        algorithm, checkpoint = loaded
        policy = Policy(algorithm=algorithm)
        # Scheduled values (an exploration rate) as they were at the checkpoint.
        policy.set_progress(
            TrainerConfig().progress(iteration=checkpoint.iteration, env_steps=checkpoint.env_steps)
        )
        choose = maker.policy_chooser(policy, greedy=not args.exploring)
        made_by.update(
            source="checkpoint",
            policy="exploring" if args.exploring else "greedy",
            algorithm=type(algorithm).__name__,
        )
    if args.noise:
        generator = torch.Generator().manual_seed(args.seed)
        choose = maker.add_noise(choose, env.action_spec(), args.noise, generator)
    made_by["noise"] = args.noise
    episodes = maker.play_episodes(
        env, choose, num_steps=args.num_steps, num_episodes=args.num_episodes
    )
    if source == "policy":
        episodes = _acting(policy, episodes, greedy=not args.exploring)
    return episodes, made_by


def _acting(policy: Any, episodes: Iterable[Any], *, greedy: bool) -> Iterator[Any]:
    """``episodes`` played within the policy's evaluation mode (greedy) or session."""
    with policy.evaluating() if greedy else policy.session():
        yield from episodes


def _references(args: argparse.Namespace, env: Any) -> dict[str, Any]:
    """The reference returns: given, measured (``--measure_references``), or None."""
    from alf.algorithms.policy import Policy
    from alf.trainers import dataset_maker as maker

    refs: dict[str, Any] = {
        "random_return": args.random_return,
        "expert_return": args.expert_return,
        "how": {"random": "given", "expert": "given"},
    }
    for key in ("random", "expert"):
        if refs[f"{key}_return"] is None:
            refs["how"][key] = None
    if not args.measure_references:
        return refs
    episodes = args.reference_episodes
    if refs["random_return"] is None:
        choose = maker.random_chooser(env.action_spec())
        refs["random_return"] = maker.mean_return(env, choose, episodes)
        refs["how"]["random"] = f"uniformly random actions, {episodes} episodes"
    if refs["expert_return"] is None:
        if not args.root_dir:
            from alf.datasets import DatasetError

            raise DatasetError("--measure_references measures the expert of a run: --root_dir")
        expert_env, (algorithm, checkpoint) = _load_run(args, args.expert_checkpoint)
        try:
            policy = Policy(algorithm=algorithm)
            choose = maker.policy_chooser(policy, greedy=True)
            with policy.evaluating():
                refs["expert_return"] = maker.mean_return(expert_env, choose, episodes)
        finally:
            expert_env.close()
        refs["how"]["expert"] = f"greedy policy of '{checkpoint.path}', {episodes} episodes"
    return refs


def _write(
    args: argparse.Namespace,
    env: Any,
    episodes: Iterable[Any],
    made_by: dict[str, Any],
    references: Callable[[], dict[str, Any]],
) -> str:
    """Writes the episodes to ``--out``, then finds the references (``references()``)
    and commits; returns the summary line."""
    from alf import config as alf_config
    from alf.datasets import DatasetWriter
    from alf.run_dir.metadata import shell_command
    from alf.trainers import dataset_maker as maker

    observation_space, action_space, spec = maker.environment_spaces(env)
    env_name = alf_config.current_bindings().get("create_environment.env_name")
    if env_name is None:
        env_name = alf_config.default_value("create_environment", "env_name")
    made_by.update(env_name=args.env_name or _literal(env_name), command=shell_command())
    with DatasetWriter(
        out=args.out,
        observation_space=observation_space,
        action_space=action_space,
        env_spec=spec,
        dataset_id=args.dataset_id,
    ) as writer:
        for episode in episodes:
            writer.add_episode(episode)
        refs = references()
        made_by["references"] = refs["how"]
        info = writer.commit(
            random_return=refs["random_return"],
            expert_return=refs["expert_return"],
            made_by=made_by,
        )
        returns = writer.returns
    return _summary(info, returns)


def _literal(value: Any) -> Any:
    """A binding's value (``"'Pendulum-v1'"`` -> ``Pendulum-v1``)."""
    import ast

    try:
        return ast.literal_eval(value) if isinstance(value, str) else value
    except (ValueError, SyntaxError):
        return value


def _summary(info: Any, returns: list[float]) -> str:
    import numpy as np

    where = os.path.dirname(info.path) if os.path.basename(info.path) == "data" else info.path
    line = (
        f"{_TOOL}: wrote {where}: {info.total_episodes} episodes, "
        f"{info.total_steps} steps, mean return {np.mean(returns):.2f} (min "
        f"{np.min(returns):.2f}, max {np.max(returns):.2f})"
    )
    if info.has_references:
        line += (
            f"; references random {info.random_return:.2f}, expert {info.expert_return:.2f} "
            f"(normalised score of the data {info.normalized_score(float(np.mean(returns))):.1f})"
        )
    return line


def _concatenate(args: argparse.Namespace) -> str:
    """``--from_datasets``: the datasets' episodes, one dataset after the other."""
    from alf.datasets import DatasetError, DatasetWriter, check_spaces, read_episodes, read_info
    from alf.run_dir.metadata import shell_command
    from alf.tensor_specs import from_gym_space

    names = [n.strip() for n in args.from_datasets.split(",") if n.strip()]
    infos = [read_info(n) for n in names]
    first = infos[0]
    for info in infos[1:]:
        check_spaces(
            info,
            observation_spec=from_gym_space(first.observation_space),
            action_spec=from_gym_space(first.action_space),
        )
        if info.env_id != first.env_id:
            raise DatasetError(
                f"dataset '{info.name}' is of {info.env_id}, '{first.name}' of {first.env_id}"
            )
    random_return = args.random_return
    expert_return = args.expert_return
    random_return = first.random_return if random_return is None else random_return
    expert_return = first.expert_return if expert_return is None else expert_return
    spec = None
    if first.env_id is not None:
        import gymnasium

        try:
            spec = gymnasium.spec(first.env_id)
        except gymnasium.error.Error:
            spec = None
    with DatasetWriter(
        out=args.out,
        observation_space=first.observation_space,
        action_space=first.action_space,
        env_spec=spec,
        dataset_id=args.dataset_id,
    ) as writer:
        for info in infos:
            for episode in read_episodes(info):
                writer.add_episode(episode)
        result = writer.commit(
            random_return=random_return,
            expert_return=expert_return,
            made_by={
                "source": "datasets",
                "policy": "datasets",
                "datasets": [i.summary() for i in infos],
                "env_name": first.made_by.get("env_name", first.env_id),
                "command": shell_command(),
            },
        )
        returns = writer.returns
    return _summary(result, returns)


def run() -> None:
    """Console-script entry point."""
    main()


if __name__ == "__main__":
    run()
