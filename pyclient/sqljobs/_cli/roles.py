"""The long-running commands: `sqljobs worker`, `sqljobs relay`, `sqljobs scheduler`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from sqljobs._cli.common import (
    DsnOption,
    database_errors,
    dsn_of,
    err_console,
    finite,
    load_app,
    setup_logs,
    whole,
)

if TYPE_CHECKING:
    from sqljobs._runtime.observing import RunObserver

# A role that cannot reach its database (at start-up, or for longer than it waits) stops
# with one line naming the cause, exit code 1: a platform starts it again. So does one
# the database refuses (a worker id another role holds); a configuration or a schema
# that does not fit stops it with exit code 2 (common.database_errors).


def worker(
    target: Annotated[str, typer.Argument(help="The App to serve, as module:attribute.")],
    queue: Annotated[list[str] | None, typer.Option(
        "--queue", "-q",
        help="A queue to serve (repeat; default: every queue the app's jobs use).")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", **whole(1, 10_000),
                                             help="Jobs run at once.")] = 10,
    dsn: DsnOption = None,
    lease: Annotated[float, typer.Option(
        help="Lease per claim, seconds (renewed every lease/3).", **finite())] = 30.0,
    poll_interval: Annotated[float, typer.Option(help="Claim at least this often, seconds.",
                                                 **finite())] = 1.0,
    prefetch: Annotated[int | None, typer.Option(
        **whole(0, 10_000),
        help="Jobs claimed ahead into a local queue, beyond the free slots "
             "(default: auto, sized to the jobs' run time, 1 to 2,000; 0: claim only "
             "for free slots).")
    ] = None,
    processes: Annotated[int, typer.Option(
        **whole(1, 1_000),
        help="Worker processes to run under one supervisor (one per core, less one "
             "for PostgreSQL when it shares the host); each gets --concurrency "
             "slots and the id <id>/<n>.")] = 1,
    drain_timeout: Annotated[float, typer.Option(
        help="On SIGTERM, seconds running jobs get to finish before going back "
             "interrupted.", **finite())] = 30.0,
    listen: Annotated[bool, typer.Option(help="Wake on LISTEN jobs_wake (else poll only).")] = True,
    listen_retry: Annotated[float, typer.Option(
        help="Seconds before reconnecting a lost LISTEN connection (doubles up to 30).",
        **finite())] = 1.0,
    worker_id: Annotated[str | None, typer.Option(
        "--id", help="This worker's id, stable across restarts (e.g. a pod name; default: "
                     "host:pid:random). It names the worker in jobs.worker and on the jobs "
                     "it claims; two live workers must not share one.")] = None,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "INFO",
    log_format: Annotated[str, typer.Option(help="text or json (one object per line).")] = "text",
    with_relay: Annotated[bool, typer.Option(
        "--with-relay", help="Also run the outbox relay in this process (`sqljobs relay`).")
    ] = False,
    with_scheduler: Annotated[bool, typer.Option(
        "--with-scheduler", help="Also run a scheduler in this process (`sqljobs scheduler`); "
                                 "one of all schedulers leads.")] = False,
    tracing: Annotated[bool, typer.Option(
        "--tracing", help="Trace runs and enqueues with OpenTelemetry (the tracing extra), "
                          "to the globally configured TracerProvider "
                          "(docs/howto-tracing.md).")] = False,
    metrics_port: Annotated[int | None, typer.Option(
        **whole(0, 65535), help="Serve Prometheus metrics (this worker's runs and the queue "
                                "gauges) at :PORT/metrics (the metrics extra; "
                                "docs/howto-metrics.md).")] = None,
    health_port: Annotated[int | None, typer.Option(
        **whole(0, 65535), help="Serve liveness (:PORT/healthz) and readiness (:PORT/readyz) "
                                "probes (docs/howto-workers.md).")] = None,
    health_stall: Annotated[float, typer.Option(
        **finite(2.0), help="/healthz fails when the worker's event loop has not run for "
                            "this many seconds.")] = 30.0,
) -> None:
    """Run the jobs an app declares until SIGTERM (drain) or a second signal (stop now)."""
    from sqljobs._runtime.supervisor import watch_parent
    from sqljobs._runtime.worker import Worker

    setup_logs(log_level, log_format)
    if processes > 1:
        raise typer.Exit(_supervise(processes, target, dsn, worker_id, dict(
            queue=queue, concurrency=concurrency, lease=lease, poll_interval=poll_interval,
            prefetch=prefetch, drain_timeout=drain_timeout, listen=listen,
            listen_retry=listen_retry, log_level=log_level, log_format=log_format,
            with_relay=with_relay, with_scheduler=with_scheduler, tracing=tracing,
            metrics_port=metrics_port, health_port=health_port, health_stall=health_stall)))
    observers: list[RunObserver] = []
    if tracing:
        observers.append(_tracing_observer())
    application = load_app(target)
    if tracing:
        _warn_without_provider()
    # The --dsn flag, else the app's own, else $SQLJOBS_DSN / $DATABASE_URL, else embedded.
    application.pools.given = dsn_of(dsn if dsn is not None else application.pools.given)
    metrics_server = health = None
    if metrics_port is not None:
        from sqljobs._cli.metrics import start_worker_metrics

        run_metrics, metrics_server = start_worker_metrics(metrics_port, application.dsn)
        observers.append(run_metrics)
    try:
        with database_errors():
            runner = Worker(application, queue or None, concurrency, lease_s=lease,
                            poll_interval=poll_interval, prefetch=prefetch,
                            drain_timeout=drain_timeout,
                            listen=listen, listen_retry_s=listen_retry, worker_id=worker_id,
                            install_signals=not (with_relay or with_scheduler),
                            observers=observers)
            watch_parent(runner.stop)  # under `--processes`: drain if the supervisor dies
            if health_port is not None:
                from sqljobs._runtime.health import WorkerHealth

                health = WorkerHealth(runner, health_port, stall_s=health_stall)
                health.start()
            if with_relay or with_scheduler:
                import asyncio

                from sqljobs._runtime.relay import Relay
                from sqljobs._runtime.roles import Role, run_roles_async
                from sqljobs._runtime.scheduler import Scheduler

                roles: list[Role] = [runner]
                if with_relay:
                    roles.append(Relay(application, install_signals=False))
                if with_scheduler:
                    roles.append(Scheduler(application, install_signals=False))
                code = asyncio.run(run_roles_async(roles))
            else:
                code = runner.run()
    finally:
        if metrics_server is not None:
            metrics_server.close()
        if health is not None:
            health.close()
    raise typer.Exit(code)


def _supervise(processes: int, target: str, dsn: str | None, worker_id: str | None,
               options: dict[str, Any]) -> int:
    """`--processes N`: the supervisor (sqljobs._runtime.supervisor) of N `sqljobs worker`
    processes with these options. Process n is `<id>/<n>`; its metrics and health ports
    (when given) are the given ones plus n - 1; only the first runs --with-relay and
    --with-scheduler (they lead or fence themselves: one process of them is enough)."""
    import os
    import socket

    from sqljobs._runtime.supervisor import Supervisor, worker_command

    family = worker_id or f"{socket.gethostname()}:{os.getpid()}"
    commands = []
    for n in range(1, processes + 1):
        argv = ["worker", target, "--id", f"{family}/{n}"]
        if dsn is not None:  # given on this command line already
            argv += ["--dsn", dsn]
        for queue in options["queue"] or ():
            argv += ["--queue", queue]
        argv += ["--concurrency", str(options["concurrency"]), "--lease", str(options["lease"]),
                 "--poll-interval", str(options["poll_interval"]),
                 "--drain-timeout", str(options["drain_timeout"]),
                 "--listen" if options["listen"] else "--no-listen",
                 "--listen-retry", str(options["listen_retry"]),
                 "--log-level", options["log_level"], "--log-format", options["log_format"],
                 "--health-stall", str(options["health_stall"])]
        if options["prefetch"] is not None:
            argv += ["--prefetch", str(options["prefetch"])]
        for port in ("metrics_port", "health_port"):
            if options[port] is not None:
                argv += [f"--{port.replace('_', '-')}", str(options[port] + n - 1)]
        if options["tracing"]:
            argv.append("--tracing")
        if n == 1 and options["with_relay"]:
            argv.append("--with-relay")
        if n == 1 and options["with_scheduler"]:
            argv.append("--with-scheduler")
        commands.append(worker_command(argv))
    # Without --dsn the processes find the database as this one would: the app's own
    # DSN, else this one (from the environment, or the embedded server it started).
    env = dict(os.environ)
    if dsn is None:
        env["SQLJOBS_DSN"] = dsn_of(load_app(target).pools.given)
    logging.getLogger("sqljobs.supervisor").info(
        "sqljobs supervisor %s: %d worker processes", family, processes)
    return Supervisor(commands, env).run()


def _tracing_observer() -> RunObserver:
    """--tracing: trace enqueues (so invoked children join their run's trace) and runs."""
    try:
        from sqljobs.tracing import TracingObserver, instrument
    except ImportError as error:

        err_console.print(f"[red]error:[/red] --tracing: {escape(str(error))}")
        raise typer.Exit(2) from error
    instrument()
    return TracingObserver()


def _warn_without_provider() -> None:
    """Once the app is loaded (its start-up may set the provider): say when spans go
    nowhere, the usual reason a --tracing worker shows no traces."""
    from sqljobs.tracing import provider_configured

    if not provider_configured():
        logging.getLogger("sqljobs.tracing").warning(
            "--tracing: no TracerProvider is configured, spans go nowhere; set one up "
            "in the app's start-up or run under opentelemetry-instrument "
            "(docs/howto-tracing.md)")


def relay(
    target: Annotated[str, typer.Argument(help="The App whose database to relay, as "
                                               "module:attribute.")],
    dsn: DsnOption = None,
    batch: Annotated[int, typer.Option(**whole(1, 10_000),
                                       help="Staged rows claimed per step.")] = 500,
    lease: Annotated[float, typer.Option(
        help="Lease on a claimed batch, seconds: a dead relay's batch waits this long.",
        **finite())] = 30.0,
    poll_interval: Annotated[float, typer.Option(
        help="Look for staged rows at least this often, seconds.", **finite())] = 1.0,
    listen: Annotated[bool, typer.Option(
        help="Wake on LISTEN jobs_outbox (else poll only).")] = True,
    retention: Annotated[float, typer.Option(
        help="Keep published outbox rows this long, seconds, then purge them.",
        **finite())] = 86_400.0,
    drain_timeout: Annotated[float, typer.Option(
        help="On SIGTERM, seconds to publish the batch held before giving up.",
        **finite())] = 30.0,
    relay_id: Annotated[str | None, typer.Option(help="This relay's id (default: host:pid:random; "
                                                      "must be unique).")] = None,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "INFO",
    log_format: Annotated[str, typer.Option(help="text or json (one object per line).")] = "text",
) -> None:
    """Publish staged jobs (the outbox) as jobs until SIGTERM (drain) or a second signal."""
    from sqljobs._runtime.relay import Relay

    setup_logs(log_level, log_format)
    application = load_app(target)
    application.pools.given = dsn_of(dsn if dsn is not None else application.pools.given)
    with database_errors():
        code = Relay(application, batch=batch, lease_s=lease, poll_interval=poll_interval,
                     listen=listen, retention_s=retention, drain_timeout=drain_timeout,
                     relay_id=relay_id).run()
    raise typer.Exit(code)


def scheduler(
    target: Annotated[str, typer.Argument(help="The App whose tasks to schedule, as "
                                               "module:attribute.")],
    dsn: DsnOption = None,
    lease: Annotated[float, typer.Option(
        help="Leader lease, seconds: a dead leader is replaced within this.",
        **finite())] = 10.0,
    tick: Annotated[float, typer.Option(
        help="Renew the lease and look for due occurrences at least this often, seconds "
             "(at most lease/3).", **finite())] = 1.0,
    misfire_grace: Annotated[float | None, typer.Option(
        help="catch_up=none: how late an occurrence may still fire, seconds "
             "(default max(5, 2*tick)).", **finite())] = None,
    scheduler_id: Annotated[str | None, typer.Option(
        help="This scheduler's id (default: host:pid:random; must be unique).")] = None,
    purge_every: Annotated[float, typer.Option(
        help="Retention: the leader runs one jobs.purge batch this often, seconds "
             "(0: never; docs/howto-retention.md).", **finite())] = 60.0,
    purge_batch: Annotated[int, typer.Option(
        help="Retention: rows one purge batch deletes at most.", **whole())] = 1000,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "INFO",
    log_format: Annotated[str, typer.Option(help="text or json (one object per line).")] = "text",
) -> None:
    """Fire the app's schedules as jobs (one leader among all schedulers) until SIGTERM."""
    from sqljobs._runtime.scheduler import Scheduler

    setup_logs(log_level, log_format)
    application = load_app(target)
    application.pools.given = dsn_of(dsn if dsn is not None else application.pools.given)
    with database_errors():
        code = Scheduler(application, lease_s=lease, tick=tick, misfire_grace_s=misfire_grace,
                         scheduler_id=scheduler_id, purge_every=purge_every or None,
                         purge_batch=purge_batch).run()
    raise typer.Exit(code)
