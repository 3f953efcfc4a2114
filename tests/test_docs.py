"""The documentation site (mkdocs.yml) builds with ``mkdocs build --strict``: no broken
link or anchor, no docstring that disagrees with its signature. Skipped where the
``docs`` extra is not installed (``pip install -e '.[docs]'``); CI builds the site itself
in ``.ci/run``."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("mkdocs", "material", "mkdocstrings")),
    reason="the docs extra is not installed: pip install -e '.[docs]'",
)


def _hooks():
    spec = importlib.util.spec_from_file_location("alf_docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mkdocs_build_strict(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The home page is the README; every package has its generated API page.
    assert "Quickstart" in (site / "index.html").read_text(encoding="utf-8")
    for package in ("alf.algorithms", "alf.environments", "alf.trainers", "alf.config"):
        page = site / "api" / package / "index.html"
        assert page.exists(), package
    algorithms = (site / "api" / "alf.algorithms" / "index.html").read_text(encoding="utf-8")
    assert "PPOAlgorithm" in algorithms
    # docs/griffe_sphinx_roles.py: the Sphinx roles of the docstrings became links.
    assert ":class:`" not in algorithms and 'class="autorefs autorefs-internal"' in algorithms
    assert (site / "bring_your_own_environment" / "index.html").exists()


def test_links_outside_docs_become_text_and_missing_ones_warn(caplog):
    hooks = _hooks()
    docs_dir = REPO / "docs"
    page = "[the figures](../benchmarks/README.md#x) and [a page](export.md#onnx)"
    out = hooks.rewrite_links(page, "scaling.md", docs_dir, from_repo_root=False)
    expected = "the figures (`benchmarks/README.md` in the repository) and [a page](export.md#onnx)"
    assert out == expected
    readme = "[docs/tracking.md](docs/tracking.md) ![curve](docs/results/a.png)"
    out = hooks.rewrite_links(readme, "index.md", docs_dir, from_repo_root=True)
    assert out == "[docs/tracking.md](tracking.md) ![curve](results/a.png)"
    # Links in code blocks are left alone.
    code = "```\n[x](../nowhere.md)\n```\n"
    assert hooks.rewrite_links(code, "export.md", docs_dir, from_repo_root=False) == code
    hooks.rewrite_links("[x](../no_such_file.md)", "export.md", docs_dir, from_repo_root=False)
    assert "no such file in the repository" in caplog.text


def test_every_public_module_has_an_api_page():
    hooks = _hooks()
    text = "\n".join(hooks.api_pages().values())
    for path in (REPO / "alf").rglob("*.py"):
        rel = path.relative_to(REPO).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        if parts == ("alf",) or any(p.startswith("_") for p in parts) or "examples" in parts:
            continue
        assert f"::: {'.'.join(parts)}\n" in text, path
