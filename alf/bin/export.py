r"""Exports a trained run's greedy policy to ONNX or TorchScript.

Usage::

    python -m alf.bin.export --root_dir=~/runs/ppo --format=onnx --out=policy.onnx \
        [--checkpoint=N|PATH]

The run's ``config.gin`` rebuilds the algorithm (as ``alf.bin.play`` does), the newest
checkpoint (or iteration ``N``, or the checkpoint file ``PATH``) supplies the
parameters and data-transformer statistics. The exported model maps raw observations
(and the recurrent state, if any) to the action ``play`` would take (and the next
state); its inputs and outputs are printed and documented in ``docs/export.md``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from alf.bin.cli import (
    ToolParser,
    add_saved_run_arguments,
    exit_on_user_code_failure,
    print_error,
    use_plain_log_lines,
)


def build_parser() -> ToolParser:
    """The command line of ``alf.bin.export``."""
    parser = ToolParser(module="alf.bin.export", doc=__doc__, takes_bindings=True)
    parser.add_argument("--root_dir", help="directory of a training run")
    parser.add_argument("--format", help="export format: onnx or torchscript")
    parser.add_argument("--out", help="the file to write")
    parser.add_argument(
        "--checkpoint",
        help="iteration of the run's checkpoint, or the path of a checkpoint file "
        "(default: newest)",
    )
    add_saved_run_arguments(parser)
    return parser


def _fail(message: str) -> None:
    sys.exit(print_error("alf.bin.export", message))


def _check_out(path: str) -> None:
    """Fails unless ``path`` can be written: its nearest existing ancestor must be a
    writable directory (the missing folders are created) and ``path`` not a directory."""
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(path):
        _fail(f"--out '{path}' is a directory; name the file to write")
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        _fail(f"cannot write --out '{path}': '{parent}' is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        _fail(f"cannot write --out '{path}': '{parent}' is not writable")


def main(argv: Sequence[str] | None = None) -> None:
    """Loads the run and writes its policy; see the module docstring."""
    args = build_parser().parse(argv)
    use_plain_log_lines()
    if not args.root_dir:
        _fail("--root_dir is required")
    if not args.format:
        _fail("--format is required (onnx or torchscript)")
    if not args.out:
        _fail("--out is required")
    _check_out(args.out)
    from alf.errors import AlfError
    from alf.run_dir.layout import check_run_dir

    root_dir = os.path.abspath(os.path.expanduser(args.root_dir))
    checkpoint: int | str | None = args.checkpoint
    if checkpoint is not None and checkpoint.strip().isdigit():
        checkpoint = int(checkpoint)
    env = None
    try:
        # The cheap checks first: a bad flag fails before the run is rebuilt.
        check_run_dir(root_dir)
        from alf.export import check_format, export_policy
        from alf.run_dir.checkpoints import read_run_checkpoint

        check_format(args.format)
        run_checkpoint = read_run_checkpoint(root_dir, checkpoint)

        import gymnasium

        from alf.configurables import import_configurables
        from alf.trainers.trained_run import load_trained_run

        import_configurables()
        try:
            env, algorithm = load_trained_run(
                root_dir,
                checkpoint=run_checkpoint,
                conf_params=args.conf_param,
                trusted_modules=args.trust_module,
            )
            result = export_policy(algorithm, args.out, format=args.format)
        except (gymnasium.error.Error, ValueError, TypeError) as err:
            if not isinstance(err, AlfError):
                exit_on_user_code_failure(err, "alf.bin.export", "while the run was being rebuilt")
            _fail(str(err))
        except OSError as err:
            _fail(f"cannot write --out '{args.out}': {err}")
    except AlfError as err:
        _fail(str(err))
    except (RuntimeError, KeyError) as err:
        _fail(f"cannot export the run in '{root_dir}': {' '.join(str(err).split())}")
    finally:
        if env is not None:
            env.close()
    signature = result.signature
    print(f"wrote {result.format} policy: {result.path} ({result.seconds:.2f} s)", flush=True)
    for kind, tensors in (("input", signature.inputs), ("output", signature.outputs)):
        for tensor in tensors:
            shape = ", ".join(str(d) for d in tensor.shape)
            print(f"  {kind} {tensor.name}: {tensor.dtype}[{shape}]", flush=True)


def run() -> None:
    """Console-script entry point."""
    main()


if __name__ == "__main__":
    run()
