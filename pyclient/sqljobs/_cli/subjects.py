"""`sqljobs subjects ...`: data subjects (GDPR) for operators and CI.

    sqljobs subjects check --app myapp:app              job types with personal data and no
                                                        subject mapping; exit 6 if any
    sqljobs subjects export SUBJECT --app myapp:app     everything stored about a subject (JSON)
    sqljobs subjects erase SUBJECT --app myapp:app --yes [--actor WHO] [--vacuum]

Export and erase use the app's declarations (`app.subject_of`, `app.subject_table`) and
run on the DSN given: erase rewrites rows of the job tables, so it needs the schema
owner's connection (docs/howto-gdpr.md).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sqljobs._app import App
from sqljobs._cli import output
from sqljobs._cli.common import DsnOption, database_errors, dsn_of, err_console, load_app
from sqljobs._cli.output import JsonOption, Listing

subjects_app = typer.Typer(
    help="Data subjects (GDPR): check the subject mappings, export or erase a subject.")

AppOption = Annotated[str, typer.Option(
    "--app", help="module:attribute of the App whose declarations map the subjects.")]


def _app(target: str, dsn: str | None) -> App:
    application = load_app(target)
    application.pools.given = dsn_of(dsn if dsn is not None else application.pools.given)
    return application


@subjects_app.command("check")
def subjects_check(target: AppOption, as_json: JsonOption = False) -> None:
    """List the declared job types that hold personal data (PersonalData fields) and map
    no subject (`app.subject_of`); exit code 6 when there is any."""
    missing = load_app(target).subject_coverage()
    if as_json:
        output.emit_json({"unmapped": missing})
    else:
        table = Listing("job type", title=f"{len(missing)} job type(s) with personal data "
                                          "and no subject mapping")
        for name in missing:
            table.add_row(name)
        output.show(table)
    if missing:
        raise typer.Exit(output.UNMAPPED)


@subjects_app.command("export")
def subjects_export(subject: Annotated[str, typer.Argument(help="The subject's id.")],
                    target: AppOption, dsn: DsnOption = None) -> None:
    """Print everything stored about SUBJECT as one JSON document: its jobs' personal
    values, where they occur in the job tables, the mapped tables' rows."""
    application = _app(target, dsn)
    with database_errors():
        found = application.subject_export(subject)
    output.emit_json(found)


@subjects_app.command("erase")
def subjects_erase(
    subject: Annotated[str, typer.Argument(help="The subject's id.")],
    target: AppOption,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Erase without asking.")] = False,
    actor: Annotated[str | None, typer.Option(
        "--actor", help="Who asked, for the audit row (default: user@host).")] = None,
    vacuum: Annotated[bool, typer.Option(
        "--vacuum", help="VACUUM the rewritten tables afterwards.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Erase SUBJECT everywhere the declarations find it, in one transaction, and write
    the audit row (counts and paths, never values). Without --yes it asks (exit 3 when
    stdin is not a terminal or the answer is no)."""
    application = _app(target, dsn)
    if not yes:
        if not sys.stdin.isatty():
            err_console.print("erase of a subject: nothing done: pass --yes to do it",
                              highlight=False, markup=False)
            raise typer.Exit(output.NOT_CONFIRMED)
        sys.stderr.write("Erase this subject's data everywhere? [y/N]: ")
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise typer.Exit(output.NOT_CONFIRMED)
    with database_errors():
        done = application.subject_erase(subject, actor=actor, vacuum=vacuum)
    if as_json:
        output.emit_json(done)
    else:
        output.say(f"erased: {len(done['jobs'])} job type(s), "
                   f"{sum(done['rows'].values())} row(s) of the job tables, "
                   f"{sum(t['rows'] for t in done['tables'].values())} row(s) of app "
                   f"tables; audit {done['audit_id']}")
