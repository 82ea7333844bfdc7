"""Replay divergence: the order a run's code asks for its steps, checked against the
order the job's stored history wrote them in (docs/howto-deploying.md).

The claim answers the stored steps' names in the order they were first written
(`sqljobs.order`). A replay must ask for them in that order before it asks for any new
step; otherwise the code that runs now is not the code that wrote the history (a step
renamed, removed or moved), and replaying it would run a side effect the history never
had, or skip one it had. Two rules, both answered by `History.skipped`:

  * a stored step asked for while a step stored before it was not asked for yet;
  * a new step asked for while a stored step was not asked for yet.

Steps started together (`asyncio.gather`) ask in whatever order the loop runs them, so
a step that finds one skipped lets the loop run once more before it decides. The
runtime's own records (`sqljobs.` names: patch markers, a saga's undo and unwind) have
no place in the order. A check costs a dictionary look-up per step and no round trip.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqljobs._client.errors import SqljobsError

ORDER_KEY = "sqljobs.order"  # the claim's list of the stored steps' names, in order
RUNTIME_PREFIX = "sqljobs."  # step names the runtime keeps for itself


class ReplayDiverged(SqljobsError, RuntimeError):
    """The code asks for its steps in another order than the job's stored history wrote
    them: a step was renamed, removed or moved since the history was written. The
    attempt fails before the step runs (the job's retry policy applies); see
    docs/howto-deploying.md for the changes that replay safely."""

    @classmethod
    def of(cls, job_id: int, asked: str, skipped: str, *, stored: bool) -> ReplayDiverged:
        what = "stored step" if stored else "new step"
        return cls(f"job {job_id}: the code asks for {what} {asked!r} before stored step "
                   f"{skipped!r}; its history was written by other code (a step renamed, "
                   f"removed or moved). Deploy code that asks for {skipped!r} first, guard "
                   f"the change with ctx.patched(...), or fork the job from a step "
                   f"(docs/howto-deploying.md)")


class History:
    """The stored steps' order and how far a replay has asked along it."""

    def __init__(self, order: Sequence[str]) -> None:
        self._order = [name for name in order if not name.startswith(RUNTIME_PREFIX)]
        self._position = {name: i for i, name in enumerate(self._order)}
        self._asked = [False] * len(self._order)
        self._next = 0  # the first stored step not asked for yet

    def ask(self, names: Iterable[str]) -> None:
        """The code asks for these steps (stored or new)."""
        for name in names:
            i = self._position.get(name)
            if i is not None:
                self._asked[i] = True
        while self._next < len(self._order) and self._asked[self._next]:
            self._next += 1

    def skipped(self, name: str) -> str | None:
        """The first stored step written before `name` (before a new step: any stored
        step) that the code has not asked for yet, or None."""
        limit = self._position.get(name, len(self._order))
        return self._order[self._next] if self._next < limit else None

    @property
    def passed(self) -> bool:
        """The history goes on past the point the code has reached: a stored step was
        not asked for yet (a patch marker asked for now answers False)."""
        return self._next < len(self._order)
