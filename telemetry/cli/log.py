"""``kip714 log status|skip``: look at an ingest log and move an exporter past damage.

``status`` reads the log directory without writing anything: the segments,
the log's start and end, each consumer's committed position and lag, every
damaged range a full verification scan finds, and the records whose payload
is not OTLP (acknowledged Kafka-protocol pushes the exporters skip as
undecodable). ``skip`` moves one
exporter's committed position, durably, the way the server commits it; it
takes the data directory's lock, so it is refused while a server runs there.

A damaged range below the log's end stops every reader at its first bad
record (``LogCorruptionError``): the data there was acknowledged and is lost,
and an operator decides to skip it. Errors are one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from telemetry.cli.common import HelpFormatter, add_location, location_of
from telemetry.errors import ConfigError
from telemetry.ingest.inspection import inspect_log
from telemetry.ingest.positions import save_positions
from telemetry.server.config import load_settings
from telemetry.server.data_dir_lock import DataDirLock, DataDirLockedError, holder
from telemetry.server.exporter_host import CONSUMER_PREFIX

if TYPE_CHECKING:
    from collections.abc import Sequence

    from telemetry.ingest.inspection import Damage, LogInspection
    from telemetry.server.config import Settings

__all__ = ["main"]

_PROG = "kip714 log"
#: The log lives here inside the data directory (``Settings.log_dir``).
LOG_SUBDIR = "log"


class LogCommandError(Exception):
    """A refusal worth one line: bad arguments for this log, or a busy directory."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Inspect the ingest log of a data directory, or move an exporter's "
        "committed position (for example past a damaged range).",
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    status = commands.add_parser(
        "status",
        help="segments, log start/end, exporter positions and lag, damaged ranges, "
        "undecodable payloads (read-only)",
        description="Scan every segment and report; writes nothing, works beside a running server.",
        formatter_class=HelpFormatter,
    )
    status.add_argument("--json", action="store_true", help="one JSON object instead of text")
    skip = commands.add_parser(
        "skip",
        help="move an exporter's committed position (refused while a server holds the directory)",
        description="Set exporter NAME's committed position to OFFSET, durably. The records "
        "between the old and the new position are not exported (or, moving back, exported again).",
        formatter_class=HelpFormatter,
    )
    skip.add_argument("--exporter", required=True, metavar="NAME", help="[exporters.NAME] name")
    skip.add_argument("--to", required=True, type=int, metavar="OFFSET", help="the new position")
    add_location([parser, status, skip])
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        config, data_dir_text = location_of(args)
        settings = load_settings(config, data_dir=data_dir_text)
        data_dir = settings.data_dir
        if settings.log.store == "kafka":
            return _kafka(settings, args)
        if args.command == "status":
            return status(data_dir, as_json=args.json)
        return skip(data_dir, args.exporter, args.to)
    except (LogCommandError, DataDirLockedError, ConfigError, OSError, ValueError) as error:
        print(f"{_PROG} {args.command}: {error}", file=sys.stderr)
        return 2


def _kafka(settings: Settings, args: argparse.Namespace) -> int:
    """The log is the pushes topic: its groups' lag per partition; ``skip`` refused."""
    from telemetry.cli import log_kafka  # noqa: PLC0415 - confluent-kafka loads only here

    if args.command != "status":
        raise LogCommandError(log_kafka.SKIP_REFUSAL)
    try:
        return log_kafka.status(settings, as_json=args.json)
    except log_kafka.KafkaStatusError as error:
        raise LogCommandError(str(error)) from None


def status(data_dir: Path, *, as_json: bool) -> int:
    log_dir = _existing_log_dir(data_dir)
    held_by = holder(data_dir)
    inspection = inspect_log(log_dir, payload_ok=_is_otlp)
    if as_json:
        print(json.dumps(_as_document(inspection, held_by), indent=1))
    else:
        print("\n".join(_as_text(inspection, data_dir, held_by)))
    return 0


def skip(data_dir: Path, exporter: str, offset: int) -> int:
    log_dir = _existing_log_dir(data_dir)
    lock = DataDirLock.acquire(data_dir)
    try:
        inspection = inspect_log(log_dir)
        consumer = CONSUMER_PREFIX + exporter
        if consumer not in inspection.positions:
            registered = sorted(
                name.removeprefix(CONSUMER_PREFIX)
                for name in inspection.positions
                if name.startswith(CONSUMER_PREFIX)
            )
            raise LogCommandError(
                f"exporter {exporter!r} has no position in {log_dir} "
                f"(registered: {', '.join(registered) or 'none'})"
            )
        if not inspection.log_start <= offset <= inspection.log_end:
            raise LogCommandError(
                f"offset {offset} is outside the log's range "
                f"[{inspection.log_start}, {inspection.log_end}]"
            )
        damage = inspection.damage_covering(offset)
        if damage is not None and offset != inspection.log_end:
            raise LogCommandError(
                f"offset {offset} is inside the damaged range starting at {damage.offset} "
                f"({damage.segment.name}, byte {damage.position}); readers cannot get past it: "
                f"use --to {damage.next_readable_offset or inspection.log_end}"
            )
        before = inspection.positions[consumer]
        save_positions(log_dir, {**inspection.positions, consumer: offset})
    finally:
        lock.release()
    change = (
        f"offsets {before}..{offset - 1} will not be exported"
        if offset > before
        else f"offsets {offset}..{before - 1} will be exported again"
        if offset < before
        else "unchanged"
    )
    print(f"exporter {exporter}: committed position {before} -> {offset} ({change})")
    return 0


def _is_otlp(payload: bytes) -> bool:
    """What the landings can decode: an OTLP ``MetricsData`` encoding."""
    try:
        MetricsData.FromString(payload)
    except Exception:  # upb's DecodeError, or whatever else the parser raises
        return False
    return True


def _existing_log_dir(data_dir: Path) -> Path:
    log_dir = data_dir / LOG_SUBDIR
    if not log_dir.is_dir():
        raise LogCommandError(f"no ingest log at {log_dir}")
    return log_dir


def _lag(inspection: LogInspection, position: int) -> int:
    return max(0, inspection.log_end - position)


def _range_text(damage: Damage) -> str:
    if damage.next_readable_offset is None:
        return f"offsets {damage.offset}.. (tail of the last segment)"
    return f"offsets {damage.offset}..{damage.next_readable_offset - 1}"


def _as_text(inspection: LogInspection, data_dir: Path, held_by: int | None) -> list[str]:
    owner = (
        f"held by a running server (pid {held_by}): the last segment may still grow"
        if held_by is not None
        else "no server holds the directory"
    )
    total = sum(s.size for s in inspection.segments)
    lines = [
        f"ingest log {inspection.directory} ({owner})",
        f"segments: {len(inspection.segments)}, {total} bytes",
    ]
    lines += [
        f"  base {s.base:>12}  size {s.size:>12}  records {s.valid_records:>9}  {s.path.name}"
        for s in inspection.segments
    ]
    lines.append(f"log start {inspection.log_start}, log end {inspection.log_end}")
    lines.append("consumers:" if inspection.positions else "consumers: none registered")
    lines += [
        f"  {name}  position {position}  lag {_lag(inspection, position)}"
        for name, position in sorted(inspection.positions.items())
    ]
    damaged = inspection.damage
    lines.append(f"damaged ranges: {len(damaged)}" if damaged else "damaged ranges: none")
    for damage in damaged:
        lines.append(
            f"  {_range_text(damage)} in {damage.segment.name} at byte {damage.position}: "
            f"{damage.reason}"
        )
        if damage.next_readable_offset is None:
            lines.append(
                f"    the next start's recovery cuts these {damage.bytes_after} bytes"
                + (" (or a write is still in progress)" if held_by is not None else "")
            )
            continue
        stuck = sorted(
            name.removeprefix(CONSUMER_PREFIX)
            for name, position in inspection.positions.items()
            if name.startswith(CONSUMER_PREFIX) and inspection.damage_covering(position) is damage
        )
        lines.append(
            f"    readers stop at offset {damage.offset}; to skip the range: kip714 log skip "
            f"--data-dir {data_dir} --exporter {stuck[0] if len(stuck) == 1 else 'NAME'} "
            f"--to {damage.next_readable_offset}"
        )
    lines.append(_undecodable_text(inspection))
    return lines


def _undecodable_text(inspection: LogInspection) -> str:
    if not inspection.undecodable:
        return "undecodable payloads: none"
    named = ", ".join(str(offset) for offset in inspection.undecodable_offsets)
    more = "" if len(inspection.undecodable_offsets) == inspection.undecodable else ", ..."
    return (
        f"undecodable payloads: {inspection.undecodable} (not OTLP; the landings skip them): "
        f"offsets {named}{more}"
    )


def _as_document(inspection: LogInspection, held_by: int | None) -> dict[str, Any]:
    return {
        "directory": str(inspection.directory),
        "held_by_pid": held_by,
        "log_start": inspection.log_start,
        "log_end": inspection.log_end,
        "segments": [
            {
                "base": s.base,
                "file": s.path.name,
                "size": s.size,
                "valid_records": s.valid_records,
            }
            for s in inspection.segments
        ],
        "consumers": [
            {
                "name": name,
                "exporter": name.removeprefix(CONSUMER_PREFIX)
                if name.startswith(CONSUMER_PREFIX)
                else None,
                "position": position,
                "lag": _lag(inspection, position),
            }
            for name, position in sorted(inspection.positions.items())
        ],
        "damage": [
            {
                "segment": d.segment.name,
                "byte": d.position,
                "first_offset": d.offset,
                "next_readable_offset": d.next_readable_offset,
                "bytes_after": d.bytes_after,
                "reason": d.reason,
            }
            for d in inspection.damage
        ],
        "undecodable": {
            "count": inspection.undecodable,
            "offsets": inspection.undecodable_offsets,
        },
    }
