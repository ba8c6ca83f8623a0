"""The ``kip714`` command line.

Subcommands arrive with the features behind them (``serve`` with the ingestion
server, ``rollup`` with the Spark jobs); until then the command only describes
itself, rather than pretending to serve.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from importlib.metadata import version


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kip714",
        description=(
            "Collects Apache Kafka client telemetry (KIP-714): Kafka clients push their "
            "metrics to kip714, which enforces Kafka-style quotas, logs every push "
            "durably, lands it in Parquet and rolls it up with Spark."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kip714 {version('kip714')}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0
