"""docs/reference/python.md is committed Markdown, generated from the docstrings, so a
reader on GitHub sees the options of `@app.job(...)` without a docs build; this test keeps
it current.

Each `<!-- api: dotted.name -->` ... `<!-- /api -->` region of the page holds that object's
signature and docstring, and its public members' (a module's classes and functions, a
class's methods and properties); `members=false` after the name leaves the members out.
The text outside the regions is written by hand.

    python -m tests.test_docs_python     # rewrite the regions from the code
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "python.md"
REGION = re.compile(r"^<!-- api: (\S+)((?: \S+)*) -->\n.*?^<!-- /api -->$",
                    re.MULTILINE | re.DOTALL)
_WIDTH = 88


def resolve(dotted: str) -> Any:
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ImportError(dotted)


def _default(value: Any) -> str:
    shown = repr(value)
    # an object's default repr carries its address: show what it is made of instead
    return f"{type(value).__name__}()" if " object at 0x" in shown else shown


def _annotation(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def signature(name: str, target: Any, keyword: str) -> str:
    """`def name(a: int = 1, *, b: str) -> X`, one parameter a line when it is long."""
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return f"{keyword} {name}"
    params, star_done = [], False
    for param in sig.parameters.values():
        if param.name in ("self", "cls"):
            continue
        text = param.name
        if param.kind is param.VAR_POSITIONAL:
            text, star_done = "*" + text, True
        elif param.kind is param.VAR_KEYWORD:
            text = "**" + text
        elif param.kind is param.KEYWORD_ONLY and not star_done:
            params.append("*")
            star_done = True
        if param.annotation is not param.empty:
            text += f": {_annotation(param.annotation)}"
        if param.default is not param.empty:
            text += f" = {_default(param.default)}" if param.annotation is not param.empty \
                else f"={_default(param.default)}"
        params.append(text)
    returns = "" if sig.return_annotation is sig.empty or keyword == "class" \
        else f" -> {_annotation(sig.return_annotation)}"
    one_line = f"{keyword} {name}({', '.join(params)}){returns}"
    if len(one_line) <= _WIDTH:
        return one_line
    return f"{keyword} {name}(\n" + "".join(f"    {p},\n" for p in params) + f"){returns}"


def _doc(target: Any) -> str:
    # a class's own docstring only: an undocumented record must not show pydantic's
    doc = inspect.cleandoc(target.__dict__.get("__doc__") or "") if inspect.isclass(target) \
        else inspect.getdoc(target)
    return doc.strip() if doc else ""


def _line(target: Any) -> int:
    try:
        return inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        return 0


def _section(level: int, dotted: str, title: str, code: str | None, doc: str) -> list[str]:
    lines = [f"{'#' * level} `{title}` {{#{dotted}}}", ""]
    if code:
        lines += ["```python", code, "```", ""]
    if doc:
        lines += [doc, ""]
    return lines


def _own_and_private_bases(cls: type) -> dict[str, Any]:
    """A class's members, with those of its bases from private sqljobs modules (App's
    declarations live in the private Registry it extends), base members first."""
    members: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        if base is cls or base.__module__.startswith("sqljobs._"):
            members.update(vars(base))
    return members


def _class_members(cls: type, dotted: str, level: int) -> list[str]:
    lines: list[str] = []
    for name, member in _own_and_private_bases(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            lines += _section(level, f"{dotted}.{name}", f"{cls.__name__}.{name}",
                              None, _doc(member))
        elif isinstance(member, (staticmethod, classmethod)) or inspect.isfunction(member):
            function = member.__func__ if hasattr(member, "__func__") else member
            keyword = "async def" if inspect.iscoroutinefunction(function) else "def"
            lines += _section(level, f"{dotted}.{name}", f"{cls.__name__}.{name}",
                              signature(name, function, keyword), _doc(function))
    return lines


def render_object(dotted: str, target: Any, level: int, members: bool = True) -> list[str]:
    if isinstance(target, ModuleType):
        lines = _section(level, dotted, dotted, None, _doc(target))
        if members:
            # a module's own classes and functions; a public module that re-exports a
            # private one (sqljobs.queries) lists what its __all__ names
            listed = getattr(target, "__all__", None)
            owned = [(name, value) for name, value in vars(target).items()
                     if not name.startswith("_")
                     and (inspect.isclass(value) or inspect.isfunction(value))
                     and (name in listed if listed is not None
                          else getattr(value, "__module__", None) == target.__name__)]
            for name, value in sorted(owned, key=lambda item: _line(item[1])):
                lines += render_object(f"{dotted}.{name}", value, level + 1)
        return lines
    if inspect.isclass(target):
        code = signature(target.__name__, target, "class")
        doc = _doc(target)
        lines = _section(level, dotted, dotted, code, doc)
        return lines + (_class_members(target, dotted, level + 1) if members else [])
    keyword = "async def" if inspect.iscoroutinefunction(target) else "def"
    return _section(level, dotted, dotted, signature(target.__name__, target, keyword),
                    _doc(target))


def render_page(text: str) -> str:
    def fill(match: re.Match[str]) -> str:
        dotted, flags = match.group(1), match.group(2).split()
        body = render_object(dotted, resolve(dotted), 3, members="members=false" not in flags)
        return f"<!-- api: {match.group(1)}{match.group(2)} -->\n" + "\n".join(body) \
            + "<!-- /api -->"

    return REGION.sub(fill, text)


def test_the_python_reference_matches_the_docstrings() -> None:
    text = PAGE.read_text()
    assert "\n::: " not in text, "python.md is plain Markdown: use an <!-- api: ... --> region"
    assert len(REGION.findall(text)) >= 35
    assert text == render_page(text), ("docs/reference/python.md differs from the docstrings: "
                                       "run `python -m tests.test_docs_python`")


def test_the_options_of_app_job_are_on_the_page() -> None:
    text = PAGE.read_text()
    start = text.index("{#sqljobs.App.job}")
    shown = text[start:text.index("\n#", start)]
    for option in ("queue", "retry", "timeout", "priority", "dead_letter", "terminal",
                   "payload", "concurrency", "rate", "limit"):
        assert f"    {option}: " in shown, option
    assert "0x" not in text, "a default's repr carries an address: the page would not be stable"


if __name__ == "__main__":
    PAGE.write_text(render_page(PAGE.read_text()))
    print(f"wrote {PAGE.relative_to(ROOT)}")
