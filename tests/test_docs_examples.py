"""The example code the how-tos show is committed in the page itself, so that it reads on
GitHub as plain Markdown, and is kept equal to the example files CI runs.

A fenced block titled with a repository path (```python title="examples/webapp/jobs.py")
holds that file's text, exactly.

    python -m tests.test_docs_examples     # rewrite every such block from its file
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# ```lang title="examples/..."  then the file's text, then the closing fence
BLOCK = re.compile(r'^(```\w+ title="(examples/[^"]+)"\n)(.*?)^(```)$', re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if BLOCK.search(p.read_text()))


def rendered(page: Path) -> str:
    """The page with each titled block holding its file's current text."""
    def fill(match: re.Match[str]) -> str:
        text = (ROOT / match.group(2)).read_text()
        return match.group(1) + text + ("" if text.endswith("\n") else "\n") + match.group(4)

    return BLOCK.sub(fill, page.read_text())


def test_the_shown_examples_are_the_example_files() -> None:
    shown = pages()
    assert {p.name for p in shown} >= {"howto-plain-sql.md", "howto-sqlalchemy.md"}
    for page in shown:
        assert page.read_text() == rendered(page), (
            f"{page.relative_to(ROOT)} shows an example that differs from its file: "
            f"run `python -m tests.test_docs_examples`")


def test_no_page_relies_on_an_include() -> None:
    # `--8<--` is a mkdocs include: on GitHub a reader sees the line, not the code
    for page in DOCS.rglob("*.md"):
        assert not re.search(r'^--8<-- "', page.read_text(), re.MULTILINE), page


if __name__ == "__main__":
    for page in pages():
        page.write_text(rendered(page))
        print(f"wrote {page.relative_to(ROOT)}")
