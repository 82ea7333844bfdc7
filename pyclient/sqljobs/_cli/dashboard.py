"""`sqljobs dashboard`: serve the operators' web dashboard (the `dashboard` extra).

Read-only unless --allow-actions or --token; see docs/howto-dashboard.md. SIGTERM (or
Ctrl-C) stops it cleanly: uvicorn finishes the requests in flight, and the command
exits 0.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Annotated

import typer
from rich.markup import escape

from sqljobs._cli.common import DsnOption, dsn_of, err_console, whole

INSTALL_HINT = "pip install 'sqljobs[dashboard]' (in a checkout: pip install -e '.[dashboard]')"
_EXTRA_MODULES = ("starlette", "jinja2", "uvicorn", "markupsafe")


def dashboard(
    port: Annotated[int, typer.Option(**whole(1, 65535), help="Port to listen on.")] = 8080,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    allow_actions: Annotated[bool, typer.Option(
        "--allow-actions", help="Enable retry, cancel, promote, remove and pause buttons "
                                "(off: the dashboard never writes).")] = False,
    token: Annotated[str | None, typer.Option(
        envvar="SQLJOBS_DASHBOARD_TOKEN",
        help="Enable actions for those who present this token (log-in form or "
             "`Authorization: Bearer`); default: $SQLJOBS_DASHBOARD_TOKEN.")] = None,
    dsn: DsnOption = None,
) -> None:
    """Serve the web dashboard: queues, jobs, workers, schedules, outbox, dead letters."""
    try:
        import uvicorn

        from sqljobs.dashboard import app
    except ImportError as error:
        if not (error.name or "").startswith(_EXTRA_MODULES):
            raise
        err_console.print("[red]error:[/red] the dashboard needs the dashboard extra: "
                          f"{escape(INSTALL_HINT)}", soft_wrap=True, highlight=False)
        raise typer.Exit(2) from error
    mode = "actions enabled" if allow_actions or token else "read-only"
    err_console.print(f"serving the dashboard on http://{host}:{port}/ ({mode})",
                      soft_wrap=True, highlight=False)
    # uvicorn catches SIGTERM and SIGINT, shuts down, then raises the signal again with
    # the handler it found installed: this one, so a requested stop ends with exit 0
    # instead of death by the signal (143). Before uvicorn runs, it stops at once.
    previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        uvicorn.run(app(dsn_of(dsn), allow_actions=allow_actions, token=token), host=host,
                    port=port, log_level="warning")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stopped(signum: int, frame: FrameType | None) -> None:
    """A stop was asked for (SIGTERM, SIGINT): a clean exit."""
    raise SystemExit(0)
