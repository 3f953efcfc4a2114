"""A griffe extension (``mkdocs.yml``: the python handler's ``extensions``) for ALF's
docstrings, which are Google style with the cross-reference roles of Sphinx.

* ``:class:`~alf.x.Name```, ``:meth:`step```, ``:mod:`.sweep``` (``:attr:``, ``:data:``,
  ``:func:``, ``:exc:``, ``:obj:`` too) become code that links to the object's entry in the
  API reference. The name is resolved like Python resolves it in the docstring's scope
  (the enclosing class, the module and its imports); ``~`` shows only the last part. A
  name that resolves to nothing rendered stays plain code: the links are optional
  (autorefs), never a warning.
* A line ending in ``::`` (a reStructuredText literal block follows) ends in ``:``; the
  indented block after it is a Markdown code block already.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):`([^`]+)`")
_LITERAL_MARKER = re.compile(r"(?m)(\S)::$")
_TITLED = re.compile(r"^(.*?)\s*<([^>]+)>$")
_NAME = re.compile(r"^\.*[A-Za-z_][\w.]*(\(\))?$")


def _canonical(obj: griffe.Object, path: str) -> str:
    """``path`` with re-exports followed (``alf.trainers.TrainerConfig`` ->
    ``alf.trainers.trainer_config.TrainerConfig``): the path of its rendered entry."""
    top, _, rest = path.partition(".")
    try:
        found = obj.modules_collection[top]
        if rest:
            found = found[rest]
        while found.is_alias:
            found = found.final_target
        return found.path
    except Exception:  # not in the collection (another package), or a broken alias
        return path


def _identifier(obj: griffe.Object, target: str) -> str | None:
    """The full path of ``target`` as named in ``obj``'s docstring, or None."""
    if target.startswith("alf."):
        return _canonical(obj, target)
    relative = target.startswith(".")
    target = target.lstrip(".")
    head, _, rest = target.partition(".")
    try:
        path = obj.resolve(head)
    except Exception:  # griffe's NameResolutionError, or an alias it cannot follow
        if not relative:
            return None
        module = obj.module
        base = module.path if module.is_init_module else module.parent.path
        return _canonical(obj, f"{base}.{target}")
    return _canonical(obj, f"{path}.{rest}" if rest else path)


def convert(obj: griffe.Object, text: str) -> str:
    def replace(match: re.Match) -> str:
        target = match.group(1).strip()
        titled = _TITLED.match(target)  # Sphinx's "title <target>"
        if titled:
            display, target = titled.group(1).strip(), titled.group(2).strip().lstrip("~")
        else:
            short = target.startswith("~")
            target = target.lstrip("~")
            display = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
        if not _NAME.match(target):
            return f"`{display}`"
        if display.endswith("()"):
            target = target[:-2]
        identifier = _identifier(obj, target)
        if identifier is None:
            return f"`{display}`"
        return f'<autoref identifier="{identifier}" optional><code>{display}</code></autoref>'

    return _LITERAL_MARKER.sub(r"\1:", _ROLE.sub(replace, text))


def _walk(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = convert(obj, obj.docstring.value)
