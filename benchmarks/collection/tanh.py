r"""Benchmark: a numpy-backed tanh (numpy's forward, torch's ``tanh_backward``: what
``alf.networks.layers.Tanh`` was until it measured slower here) against ``torch.tanh`` on
CPU float32, forward only (collection) and forward + backward (training), at the batch
sizes ALF's tanh MLPs see.

The two contenders alternate round by round in one process (1 torch thread), so that
drifting load on a shared machine hits both alike; each round times ``--calls`` calls
and the medians over ``--rounds`` rounds are printed, with the ratio torch / numpy
(above 1: the numpy path is faster).

Usage::

    python benchmarks/collection/tanh.py
    python benchmarks/collection/tanh.py --rows 1 16 256 2048 --width 64 --rounds 15
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from collections.abc import Callable

import numpy as np
import torch


class _NumpyTanh(torch.autograd.Function):
    """tanh whose forward runs numpy's kernel (CPU float32)."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        y = torch.from_numpy(np.tanh(x.detach().numpy()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def numpy_tanh(x: torch.Tensor) -> torch.Tensor:
    """The numpy-backed tanh, with autograd when ``x`` needs it."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _NumpyTanh.apply(x)
    return torch.from_numpy(np.tanh(x.numpy()))


def _time_calls(fn: Callable[[], object], calls: int) -> float:
    """Microseconds per call of ``fn`` over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def _contenders(x: torch.Tensor, grad: torch.Tensor) -> dict[str, dict[str, Callable[[], object]]]:
    leaf = x.clone().requires_grad_(True)

    def train(activation: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], object]:
        def step() -> object:
            y = activation(leaf)
            (g,) = torch.autograd.grad(y, leaf, grad)
            return g

        return step

    def infer(activation: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], object]:
        def step() -> object:
            with torch.no_grad():
                return activation(x)

        return step

    return {
        "forward": {"numpy": infer(numpy_tanh), "torch": infer(torch.tanh)},
        "forward+backward": {"numpy": train(numpy_tanh), "torch": train(torch.tanh)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16, 256, 2048])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"torch {torch.__version__}, 1 thread; uptime: {uptime}")
    print(f"{'mode':18s} {'shape':>10s} {'numpy us':>9s} {'torch us':>9s} {'torch/numpy':>11s}")
    for rows in args.rows:
        x = torch.randn(rows, args.width)
        grad = torch.randn(rows, args.width)
        for mode, fns in _contenders(x, grad).items():
            times: dict[str, list[float]] = {name: [] for name in fns}
            for fn in fns.values():  # warm-up
                _time_calls(fn, 50)
            for _ in range(args.rounds):
                for name, fn in fns.items():
                    times[name].append(_time_calls(fn, args.calls))
            numpy_us = statistics.median(times["numpy"])
            torch_us = statistics.median(times["torch"])
            shape = f"{rows}x{args.width}"
            print(
                f"{mode:18s} {shape:>10s} {numpy_us:9.1f} {torch_us:9.1f} "
                f"{torch_us / numpy_us:11.2f}"
            )


if __name__ == "__main__":
    main()
