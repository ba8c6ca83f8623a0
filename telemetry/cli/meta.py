"""``kip714 meta migrate --to-kafka``: move a node's dynamic changes into the shared topic.

::

    kip714 meta migrate --to-kafka --config FILE [--data-dir DIR] [--force]

The file's ``[meta]`` section names the topic (``store = "kafka"``); the
local store is ``<data_dir>/meta/``. The data directory's lock is taken, so
the command is refused while a server runs there. Refusals and errors are
one line on stderr and exit status 2; a topic that already holds records is
refused (exit 1) unless ``--force``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from telemetry.admin.stored import check_stored_state
from telemetry.cli.common import HelpFormatter, add_location, location_of
from telemetry.errors import ConfigError
from telemetry.metastore.migrate import MigrationRefusedError, migrate_to_kafka
from telemetry.metastore.store import MetadataStoreError
from telemetry.server.config import load_settings
from telemetry.server.data_dir_lock import DataDirLock, DataDirLockedError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kip714 meta",
        description="Manage where the metadata store (dynamic subscriptions, quotas, SCRAM "
        "credentials) lives.",
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    migrate = commands.add_parser(
        "migrate",
        help="copy the local store (<data_dir>/meta) into the [meta] Kafka topic",
        description="Copy every subscription, quota entity and SCRAM credential of the local "
        "store into the Kafka topic the config's [meta] section names, one message per entity. "
        'Run it with the server stopped, then start the nodes with store = "kafka".',
        formatter_class=HelpFormatter,
    )
    migrate.add_argument(
        "--to-kafka", action="store_true", required=True, help="the direction (the only one)"
    )
    migrate.add_argument(
        "--force",
        action="store_true",
        help="write over a topic that already holds records (local values win key by key)",
    )
    add_location(
        [parser, migrate],
        config_help='the server\'s TOML configuration, with [meta] store = "kafka" (required)',
    )
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    config, data_dir = location_of(args)
    try:
        settings = load_settings(config, data_dir=data_dir)
    except ConfigError as error:
        print(f"kip714 meta: config error: {error}", file=sys.stderr)
        return 2
    if settings.meta.store != "kafka":
        print(
            f'kip714 meta: {config or "no --config"}: no [meta] store = "kafka" to migrate to '
            "(give --config FILE)",
            file=sys.stderr,
        )
        return 2
    try:
        lock = DataDirLock.acquire(settings.data_dir)
    except DataDirLockedError as error:
        print(f"kip714 meta: {error}; stop the server first", file=sys.stderr)
        return 2
    try:
        done = migrate_to_kafka(
            settings.data_dir, settings.meta, force=args.force, check=check_stored_state
        )
    except MigrationRefusedError as error:
        print(f"kip714 meta: refused: {error}", file=sys.stderr)
        return 1
    except (OSError, MetadataStoreError) as error:
        print(f"kip714 meta: {error}", file=sys.stderr)
        return 2
    finally:
        lock.release()
    print(
        f"copied {done.records} records ({done.entities} entities) from "
        f"{settings.data_dir / 'meta'} to topic {settings.meta.topic} at "
        f"{settings.meta.bootstrap_servers}; the topic now ends at offset {done.next_offset}"
    )
    return 0
