"""The documentation site stays whole: every page is in the nav, the CLI reference
matches the commands, the README and docs name only commands that exist, and what a user
reads names only public modules.

The site itself is built by `make docs` (mkdocs build --strict, in CI after the tests),
which fails on any warning: a broken link or anchor, a page missing from the nav, a
docstring mkdocstrings cannot read.

    python -m tests.test_docs     # rewrite the generated part of docs/reference/cli.md
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CLI_REFERENCE = DOCS / "reference" / "cli.md"
MARKER = "<!-- generated: everything below this line -->\n"


def render_cli_reference() -> str:
    """The commands' reference as Typer's docs utility writes it, one heading level down."""
    generated = subprocess.run(
        [sys.executable, "-m", "typer", "sqljobs._cli", "utils", "docs", "--name", "sqljobs"],
        capture_output=True, text=True, check=True, cwd=ROOT, env={"PATH": "", "LANG": "C.UTF-8"},
    ).stdout
    lines, fenced = [], False
    for line in generated.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        lines.append("#" + line if line.startswith("#") and not fenced else line)
    return "\n" + "\n".join(lines).strip() + "\n"


def write_cli_reference() -> None:
    text = CLI_REFERENCE.read_text()
    head = text.split(MARKER)[0]
    CLI_REFERENCE.write_text(head + MARKER + render_cli_reference())


def test_the_cli_reference_matches_the_commands() -> None:
    text = CLI_REFERENCE.read_text()
    assert MARKER in text
    assert text.split(MARKER, 1)[1] == render_cli_reference(), (
        "docs/reference/cli.md differs from the commands: run `python -m tests.test_docs`")


def nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:"):]
    title = r"""(?:'[^'\n]*'|"[^"\n]*"|[^:'"\n]+): """
    return re.findall(rf"^\s+- (?:{title})?(\S+\.md)\s*$", nav, re.MULTILINE)


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    nav = nav_pages()
    missing = sorted(set(pages) - set(nav))
    assert not missing, f"add these pages to the nav in mkdocs.yml: {missing}"
    absent = sorted(set(nav) - set(pages))
    assert not absent, f"mkdocs.yml lists pages that do not exist: {absent}"
    assert len(nav) == len(set(nav)), "a page is listed twice in the nav"


def _commands() -> set[str]:
    """Every `sqljobs ...` command path the CLI has (e.g. "dev stop")."""
    import typer.main

    from sqljobs._cli import app

    found: set[str] = set()

    def walk(group: object, prefix: str) -> None:
        for name, command in getattr(group, "commands", {}).items():
            path = f"{prefix} {name}".strip()
            found.add(path)
            walk(command, path)

    walk(typer.main.get_command(app), "")
    return found


def command_lines(markdown: str) -> list[str]:
    """Every `sqljobs ...` command in a page's code: shell lines of fenced blocks, and
    inline code spans, that start with `sqljobs `."""
    found: list[str] = []
    for block in re.findall(r"^```(?:bash|console|shell|sh)\n(.*?)^```", markdown,
                            re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            line = line.strip().removeprefix("$ ")
            found += [part.strip() for part in re.split(r"&&|\|\||;|\$\(", line)
                      if part.strip().startswith("sqljobs ")]
    found += [span for span in re.findall(r"`([^`\n]+)`", markdown)
              if span.startswith("sqljobs ")]
    return found


def test_docs_and_readme_name_only_commands_that_exist() -> None:
    commands = _commands()
    assert {"migrate", "worker", "workers", "dev status", "dev stop"} <= commands
    files = [ROOT / "README.md", *sorted(DOCS.rglob("*.md")),
             *sorted((ROOT / "examples").rglob("*.md"))]
    unknown: list[str] = []
    for path in files:
        for line in command_lines(path.read_text()):
            first = line.split()[1] if len(line.split()) > 1 else ""
            if first.startswith(("-", "[")):
                continue  # `sqljobs --help`, `sqljobs [OPTIONS] COMMAND`
            words = [w for w in line.split()[1:3] if re.fullmatch(r"[a-z][a-z-]*", w)]
            if words and (" ".join(words) in commands or words[0] in commands):
                continue
            unknown.append(f"{path.relative_to(ROOT)}: {line}")
    assert not unknown, f"these name commands that do not exist: {unknown}"


# `sqljobs._x`, also below a public package (`sqljobs.metrics._gauges`)
_PRIVATE_MODULE = re.compile(r"\bsqljobs(?:\.[A-Za-z]\w*)*\._\w")


def test_what_a_user_reads_names_no_private_module() -> None:
    """A private module's path may change in any release (docs/design/package-layers.md),
    so the README, the pages and the examples name only what `sqljobs` and its public
    modules export. docs/design/ is left out: its pages are the architecture records,
    written for contributors, and naming the private layers is what they are for."""
    files = [ROOT / "README.md",
             *sorted(p for p in DOCS.rglob("*") if p.is_file()
                     and p.suffix in (".md", ".py", ".yml", ".toml", ".sql")
                     and "design" not in p.relative_to(DOCS).parts),
             *sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file()
                     and p.suffix in (".md", ".py", ".txt", ".toml", ".cfg", ".ini")
                     and "__pycache__" not in p.parts)]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in files
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if _PRIVATE_MODULE.search(line)]
    assert not found, f"these name a private module; export what they need: {found}"


def test_the_private_module_pattern() -> None:
    assert _PRIVATE_MODULE.search("from sqljobs._schema.migrate import x")
    assert _PRIVATE_MODULE.search("`sqljobs.metrics._gauges`")
    assert not _PRIVATE_MODULE.search("from sqljobs.alembic import sqlalchemy_url")
    assert not _PRIVATE_MODULE.search("sqljobs:_migrations/versions")


if __name__ == "__main__":
    write_cli_reference()
    print(f"wrote {CLI_REFERENCE.relative_to(ROOT)}")
