"""Command-line tools: ``train`` and ``play`` (one run), ``sweep`` (seeds and grids),
``tune`` (Optuna), ``plot`` (curves) and ``report`` (tables with confidence intervals).

Run from the folder that holds a clone of ALF (``python -m alf.bin.train
--conf=alf/alf/examples/...``), the clone's folder ``alf/`` has no ``__init__.py`` and
Python imports it as a namespace package named ``alf`` that shadows the installed one
(its subpackages are still found through the install). Importing this package repairs
that: the real ``alf/__init__.py`` is loaded as ``alf``.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _repair_shadowed_package() -> None:
    """Replaces a namespace package ``alf`` (a folder named ``alf`` in the current
    directory) with ALF's real package, loaded from beside this file."""
    package = sys.modules.get("alf")
    if package is None or getattr(package, "__file__", None) is not None:
        return
    directory = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "alf", os.path.join(directory, "__init__.py"), submodule_search_locations=[directory]
    )
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["alf"] = module
    spec.loader.exec_module(module)


_repair_shadowed_package()
