"""MkDocs hooks for ALF's documentation site (``mkdocs.yml``: ``hooks:``).

* The API reference: one generated page per package of ``alf/`` (every public submodule
  on it) and one per top-level module, listed under "API reference" in the navigation.
  The pages hold only ``::: module`` directives; mkdocstrings renders them from the
  docstrings with griffe, statically (nothing is imported, torch is not needed). A new
  module appears on its package's page without any edit here.
* The home page: ``docs/index.md`` begins with an include marker; the page becomes the
  repository's ``README.md``, its links rewritten for the site (``docs/x.md`` ->
  ``x.md``), so the README is not copied into ``docs/`` (the rest of ``index.md`` is a
  note for readers on GitHub).
* Links to files outside ``docs/`` (``../benchmarks/README.md`` in a page,
  ``benchmarks/README.md`` in the README) work on GitHub but not on the site: they become
  plain text naming the file. A target that does not exist in the repository is a
  warning, so ``mkdocs build --strict`` fails on it like on any broken link.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.plugins.alf_hooks")

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "alf"
API_DIR = "api"
API_SECTION = "API reference"
README_MARKER = "<!-- alf-docs: include README.md -->"

# Inline links and images: [text](target) / ![alt](target "title"). The text may span
# lines; nested brackets are not used in ALF's pages.
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)(\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _public(name: str) -> bool:
    return not name.startswith("_")


def _submodules(package_dir: Path, dotted: str) -> list[str]:
    """Dotted names of the public modules under a package, depth first, sorted."""
    names = []
    for child in sorted(package_dir.iterdir()):
        if child.is_file() and child.suffix == ".py" and _public(child.stem):
            names.append(f"{dotted}.{child.stem}")
        elif child.is_dir() and (child / "__init__.py").exists() and _public(child.name):
            names.append(f"{dotted}.{child.name}")
            names.extend(_submodules(child, f"{dotted}.{child.name}"))
    return names


def api_pages() -> dict[str, str]:
    """``{page path: markdown}`` for the API reference: ``alf.api`` (the Python API), the
    packages, then the other top-level modules."""
    packages = {}
    modules = []
    for child in sorted(PACKAGE.iterdir()):
        dotted = f"alf.{child.stem}"
        if child.is_dir() and (child / "__init__.py").exists() and _public(child.name):
            lines = [
                f"# {dotted}",
                "",
                f"::: {dotted}",
                "    options:",
                "      show_root_heading: false",
                "      members: false",
                "",
            ]
            for sub in _submodules(child, dotted):
                lines += [f"::: {sub}", "    options:", "      heading_level: 2", ""]
            packages[f"{API_DIR}/{dotted}.md"] = "\n".join(lines)
        elif child.is_file() and child.suffix == ".py" and _public(child.stem):
            modules.append(dotted)

    def module_page(dotted: str) -> str:
        lines = [f"# {dotted}", "", f"::: {dotted}", "    options:"]
        return "\n".join(lines + ["      show_root_heading: false", ""])

    # The Python API (alf.train, alf.load) first: where a reader of the API starts.
    first = [dotted for dotted in modules if dotted == "alf.api"]
    pages = {f"{API_DIR}/{dotted}.md": module_page(dotted) for dotted in first}
    pages.update(packages)
    for dotted in modules:
        if dotted not in first:
            pages[f"{API_DIR}/{dotted}.md"] = module_page(dotted)
    return pages


def on_config(config):
    """Lists the generated API pages in the navigation, under "API reference"."""
    entries = list(api_pages())
    nav = config.nav
    if nav is None:
        return config
    for item in nav:
        if isinstance(item, dict) and API_SECTION in item:
            section = item[API_SECTION]
            if not isinstance(section, list):
                section = [section]
            item[API_SECTION] = section + entries
            return config
    nav.append({API_SECTION: entries})
    return config


def on_files(files, config):
    for src_uri, content in api_pages().items():
        files.append(File.generated(config, src_uri, content=content))
    return files


def _outside_docs(target: str, page_dir: str, text: str, docs_dir: Path, page: str) -> str:
    """Plain text for a link to a file of the repository that is not in ``docs/``."""
    path = target.split("#", 1)[0]
    repo_path = posixpath.normpath(posixpath.join("docs", page_dir, path))
    if not (REPO / repo_path).exists():
        log.warning("%s: link to '%s': no such file in the repository", page, target)
    text = " ".join(text.split())
    if text.strip("`") == repo_path or text.strip("`") == path:
        return f"`{repo_path}`"
    return f"{text} (`{repo_path}` in the repository)"


def rewrite_links(markdown: str, page: str, docs_dir: Path, from_repo_root: bool) -> str:
    """Rewrites the relative links of one page (see the module's docstring).

    ``from_repo_root``: the text's links are relative to the repository's root (the
    README), not to the page's folder under ``docs/``.
    """
    page_dir = posixpath.dirname(page)

    def replace(match: re.Match) -> str:
        bang, text, target, title = match.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return match.group(0)
        path = target.split("#", 1)[0]
        if from_repo_root:
            if path.startswith("docs/"):
                target = target[len("docs/") :]
                return f"{bang}[{text}]({target}{title or ''})"
            return _outside_docs("../" + target, page_dir, text, docs_dir, page)
        resolved = posixpath.normpath(posixpath.join(page_dir, path))
        if resolved.startswith("../") or resolved == "..":
            return _outside_docs(target, page_dir, text, docs_dir, page)
        return match.group(0)

    out, block, in_fence = [], [], False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line):
            if not in_fence:
                out.append(_LINK.sub(replace, "".join(block)))
                block = []
            in_fence = not in_fence
            out.append(line)
        elif in_fence:
            out.append(line)
        else:
            block.append(line)
    out.append(_LINK.sub(replace, "".join(block)))
    return "".join(out)


def on_page_markdown(markdown, page, config, files):
    docs_dir = Path(config.docs_dir)
    src = page.file.src_uri
    if markdown.lstrip().startswith(README_MARKER):
        # The whole page is the README (the rest of index.md is for readers on GitHub).
        readme = (REPO / "README.md").read_text(encoding="utf-8")
        return rewrite_links(readme, src, docs_dir, from_repo_root=True)
    return rewrite_links(markdown, src, docs_dir, from_repo_root=False)
