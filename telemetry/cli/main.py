"""The ``kip714`` command line.

``kip714 serve`` runs the ingestion server on embedded defaults, a TOML file,
and a few flags. Configuration errors and failures to start (a listener that
cannot bind, a landing fed by another ingest log) end the command with
status 2 and one line naming the key or part and the value — never a
traceback, and no log line before it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from importlib import import_module
from importlib.metadata import version
from typing import TYPE_CHECKING

from telemetry.cli.common import HelpFormatter
from telemetry.cli.rollup_args import RollupConfigError, rollup_argv

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence
    from typing import Any

    from telemetry.server.config import Settings

_log = logging.getLogger(__name__)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

_DELEGATED = {
    "demo": "telemetry.cli.demo:main",
    "log": "telemetry.cli.log:main",
    "lake": "telemetry.cli.lake:main",
    "subscriptions": "telemetry.admin.cli:subscriptions_main",
    "quotas": "telemetry.admin.cli:quotas_main",
    "meta": "telemetry.cli.meta:main",
    "alerts": "telemetry.cli.alerts:main",
}
"""Commands with parsers of their own, imported only when run.

Why lazily: importing the server (exporters, pyiceberg, pyarrow) takes
seconds, and ``kip714 rollup`` must answer an empty range in under two.
"""


def build_parser() -> argparse.ArgumentParser:
    from telemetry.kafka.settings import DEFAULT_KAFKA_LISTEN  # noqa: PLC0415 - see _DELEGATED
    from telemetry.server.config import DEFAULT_HTTP_LISTEN  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="kip714",
        description=(
            "Collects Apache Kafka client telemetry (KIP-714): Kafka clients (directly, or "
            "through a Kafka broker's plugin) and OpenTelemetry SDKs push their metrics to "
            "kip714, which enforces Kafka's quotas (push byte rate, request time and "
            "instance creations per client on every listener; connection counts, creation "
            "rates, idle time and request memory on every listener), logs every push "
            "durably, lands it in an Apache Iceberg table and rolls it up with Spark."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kip714 {version('kip714')}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="run the ingestion server",
        description="Run the ingestion server. With no --config it runs on embedded defaults.",
        formatter_class=HelpFormatter,
    )
    serve.add_argument(
        "--config",
        metavar="FILE",
        help="TOML configuration file; relative paths in it are relative to its directory "
        "(default: none, the embedded defaults)",
    )
    serve.add_argument(
        "--kafka-listen",
        metavar="HOST:PORT",
        help=f"Kafka-protocol listener (default {DEFAULT_KAFKA_LISTEN}; port 0 picks a free port)",
    )
    serve.add_argument(
        "--http-listen",
        metavar="HOST:PORT",
        help=f"HTTP listener (default {DEFAULT_HTTP_LISTEN}; port 0 picks a free port)",
    )
    serve.add_argument(
        "--data-dir",
        metavar="DIR",
        help="the ingest log (DIR/log), the metadata store (DIR/meta), every built-in exporter "
        "given no path, and the default lake (DIR/lake); relative to the working directory "
        "(default: the config's data_dir, else ./kip714-data)",
    )
    serve.add_argument(
        "--log-level", default="INFO", help=f"{', '.join(LOG_LEVELS)} (default INFO)"
    )
    serve.add_argument(
        "--log-format",
        default="auto",
        choices=["auto", "json", "console"],
        help="log rendering (default auto: console on a terminal, else JSON)",
    )
    commands.add_parser(
        "demo",
        help="run a server, real Kafka clients and the rollups, and print the health view",
        add_help=False,
    )
    commands.add_parser(
        "log",
        help="inspect the ingest log or move an exporter past damage (kip714 log --help)",
        add_help=False,
    )
    commands.add_parser(
        "lake",
        help="the Iceberg landing: tables, snapshots, query, compact, expire, import-parquet "
        "(kip714 lake --help)",
        add_help=False,
    )
    commands.add_parser(
        "subscriptions",
        help="describe or change client-metrics subscriptions (kip714 subscriptions --help)",
        add_help=False,
    )
    commands.add_parser(
        "quotas",
        help="describe or change client quotas (kip714 quotas --help)",
        add_help=False,
    )
    commands.add_parser(
        "meta",
        help="copy the local metadata store into a Kafka topic (kip714 meta --help)",
        add_help=False,
    )
    commands.add_parser(
        "alerts",
        help="the client health rules as Prometheus alerting rules (kip714 alerts --help)",
        add_help=False,
    )
    commands.add_parser(
        "rollup",
        help="run the Spark rollups over the landing (kip714 rollup --help for its flags)",
        add_help=False,
    )
    commands.add_parser(
        "report",
        help="write an HTML client-health report from the rollups (kip714 report --help)",
        add_help=False,
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    # Commands with parsers of their own get their arguments untouched.
    if arguments and arguments[0] == "rollup":
        return rollup(arguments[1:])
    if arguments and arguments[0] == "report":
        return report(arguments[1:])
    if arguments[:2] == ["quotas", "advise"]:
        from telemetry.cli import quota_advice  # noqa: PLC0415 - see _DELEGATED

        return quota_advice.main(arguments[2:])
    if arguments and arguments[0] in _DELEGATED:
        module, function = _DELEGATED[arguments[0]].split(":")
        command: Callable[[list[str]], int] = getattr(import_module(module), function)
        return command(arguments[1:])
    return _serve_command(arguments)


def _serve_command(arguments: list[str]) -> int:
    from telemetry.cli.log_setup import configure_logging  # noqa: PLC0415 - see _DELEGATED
    from telemetry.errors import ConfigError  # noqa: PLC0415
    from telemetry.server.config import load_settings  # noqa: PLC0415
    from telemetry.server.data_dir_lock import DataDirLockedError  # noqa: PLC0415
    from telemetry.server.malloc_arenas import limit_malloc_arenas  # noqa: PLC0415
    from telemetry.server.startup import StartupError  # noqa: PLC0415

    parser = build_parser()
    args = parser.parse_args(arguments)
    if args.command != "serve":
        parser.print_help()
        return 0
    try:
        settings = load_settings(
            args.config,
            data_dir=args.data_dir,
            kafka_listen=args.kafka_listen,
            http_listen=args.http_listen,
        )
        if args.log_level.upper() not in LOG_LEVELS:
            raise ConfigError("--log-level", args.log_level, f"expected {', '.join(LOG_LEVELS)}")
    except ConfigError as error:
        print(f"kip714: config error: {error}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, args.log_format)
    limit_malloc_arenas()  # before any thread starts
    try:
        return run_event_loop(serve(settings))
    except (ConfigError, StartupError) as error:  # exporter options are checked at start
        kind = "config error" if isinstance(error, ConfigError) else "cannot start"
        # One line even when a library's message has several (SQLAlchemy's do).
        print(f"kip714: {kind}: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except DataDirLockedError as error:
        print(f"kip714: {error}; stop it or use another --data-dir", file=sys.stderr)
        return 2


def rollup(argv: Sequence[str]) -> int:
    """``kip714 rollup``: the job ``spark-submit spark_jobs/job.py`` runs, and ``--config``."""
    try:
        from spark_jobs import job  # noqa: PLC0415 - PySpark loads only for this command
    except ImportError as error:
        print(
            f"kip714: rollup needs PySpark ({error}); install it with: "
            "python3 -m pip install -e '.[spark]'",
            file=sys.stderr,
        )
        return 2
    try:
        job_argv = rollup_argv(argv, alert_rules=True)
    except RollupConfigError as error:
        print(f"kip714 rollup: error: {error}", file=sys.stderr)
        return 2
    return job.main(job_argv)


def report(argv: Sequence[str]) -> int:
    """``kip714 report``, with ``--config FILE`` read as the rollups read it.

    Its ``[lake]`` names the catalog; its ``[alerts] rules`` the meanings the alerts show.
    """
    try:
        report_argv = rollup_argv(argv, alert_rules=True)
    except RollupConfigError as error:
        print(f"kip714 report: error: {error}", file=sys.stderr)
        return 2
    from report import main as report_main  # noqa: PLC0415 - see _DELEGATED

    return report_main(report_argv)


def run_event_loop(main: Coroutine[Any, Any, int]) -> int:
    """uvloop where it is installed (a third less CPU per push), asyncio otherwise."""
    try:
        import uvloop  # noqa: PLC0415 - optional on platforms without it
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def tune_garbage_collector() -> None:
    """Collect less often: the hot path makes many short-lived objects and few cycles.

    Freezing moves everything built at start (config, caches, modules) out of
    the collector's view, so the rarer collections also scan less.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)


async def serve(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT; SIGHUP re-reads subscriptions, quotas and limits.

    Exits 0 after an orderly stop, 1 if the ingest log or an exporter failed
    while running (see ``Server.failures``).
    """
    from telemetry.server.bootstrap import Server  # noqa: PLC0415 - see _DELEGATED
    from telemetry.server.data_dir_lock import DataDirLockedError  # noqa: PLC0415

    server = Server(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, server.reload_config)
    try:
        await server.start()
    except DataDirLockedError:
        raise  # nothing was opened, so there is nothing to stop (and nothing to log)
    except Exception:
        # A failed start ends with its one error line, naming the cause: undoing
        # the parts that did start is routine, and how it went (an exporter slow
        # to close on a loaded machine) would only bury that line.
        root = logging.getLogger()
        root.setLevel(max(root.level, logging.CRITICAL))
        await server.stop()
        server.discard_created_data_dir()
        raise
    tune_garbage_collector()
    await stop.wait()
    _log.info("kip714 stopping")
    await server.stop()
    if server.failures:
        # Landed data may be missing until the next start: say so to the supervisor.
        _log.error("kip714 exits with status 1: %s", "; ".join(server.failures.values()))
        return 1
    return 0
