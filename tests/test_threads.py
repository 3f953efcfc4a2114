"""``alf.utils.threads``: torch's and numpy's BLAS threads are limited together."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from alf.utils.threads import set_cpu_threads

_SCRIPT = """
import json, numpy, torch
from threadpoolctl import threadpool_info
from alf.utils.threads import set_cpu_threads
set_cpu_threads({n})
blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(json.dumps([torch.get_num_threads(), blas]))
"""


@pytest.mark.parametrize("num_threads", [1, 2])
def test_torch_and_numpy_blas_threads_follow(num_threads):
    # A fresh interpreter: the limits are process-wide.
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(n=num_threads)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    torch_threads, blas = json.loads(out)
    assert torch_threads == num_threads
    assert blas and all(n == num_threads for n in blas)


def test_zero_threads_is_refused():
    with pytest.raises(ValueError, match="num_threads must be >= 1, got 0"):
        set_cpu_threads(0)
