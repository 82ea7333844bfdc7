"""What the CLI tests share."""

from __future__ import annotations

import re
from typing import Any


def one_line(result: Any, pattern: str) -> str:
    """The one line of the output the refusal's message is on (a usage error prints in
    Typer's box, a database refusal as `error: ...`): found whole on one line."""
    output: str = result.output
    found = [line for line in output.splitlines() if re.search(pattern, line)]
    assert len(found) == 1, (pattern, output)
    return found[0]
