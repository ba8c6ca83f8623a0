"""What ``kip714 serve`` says at start: its one-line refusals, its serving line, its warnings.

Kept beside the composition root (``bootstrap``) so that it stays about
assembling parts: every start-up failure becomes one ``StartupError`` line
naming the path or address and the fix, and the serving line and start-up
warnings say what runs (exporters, subscriptions, security).
"""

from __future__ import annotations

import errno
import logging
import os
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from exporters.iceberg.settings import lake_location
from telemetry.admin.authorizer import is_loopback
from telemetry.security.tls import server_context
from telemetry.server.data_dir_lock import LOCK_FILE
from telemetry.server.lake_settings import LAKE_EXPORTER_TYPE

if TYPE_CHECKING:
    from collections.abc import Iterable

    from telemetry.core.subscriptions import Subscription
    from telemetry.security.settings import SecuritySettings, TlsSettings
    from telemetry.server.config import ExporterSettings, Settings

__all__ = [
    "StartupError",
    "cannot_listen",
    "describe_exporter",
    "describe_security",
    "describe_subscriptions",
    "first_missing",
    "refuse_a_moved_data_dir",
    "start_hint",
    "tls_context",
    "unusable_data_dir",
    "warn_about_exposure",
    "warn_about_unmatched_kinds",
]

#: The composition root's logger: these lines are its start-up lines.
_log = logging.getLogger("telemetry.server.bootstrap")


class StartupError(Exception):
    """kip714 could not start: one line naming the part (and its address or path) and why."""


def first_missing(path: Path) -> Path | None:
    """The outermost level of ``path`` that does not exist yet (what ``mkdir -p`` would create)."""
    missing = None
    current = path.absolute()
    while not current.exists() and not current.is_symlink() and current != current.parent:
        missing = current
        current = current.parent
    return missing


def unusable_data_dir(data_dir: Path, error: OSError) -> str:
    where = os.path.abspath(data_dir)
    reason = os.strerror(error.errno) if error.errno else str(error)
    if error.errno in (errno.ENOTDIR, errno.EEXIST):
        fix = "it (or a parent) is a file, not a directory: give another --data-dir"
    elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = (
            "this user cannot write there: give another --data-dir or make it writable "
            f"(the server creates {LOCK_FILE}, log/, meta/ and lake/ in it)"
        )
    else:
        fix = "give another --data-dir"
    path = f" ({error.filename})" if error.filename and str(error.filename) != where else ""
    return f"data directory {where}: {reason}{path}; {fix}"


def refuse_a_moved_data_dir(settings: Settings) -> None:
    """A relative ``data_dir`` used to mean the working directory; it now means the file's.

    If that moves the data directory away from an ingest log to a place
    holding none, starting would begin an empty log and lake beside the old
    ones (acknowledged pushes not yet exported would never be): refuse.
    """
    former = settings.former_data_dir
    if former is None or os.path.abspath(former) == os.path.abspath(settings.data_dir):
        return
    if (former / "log").is_dir() and not (settings.data_dir / "log").is_dir():
        raise StartupError(
            f"data_dir {str(former)!r} in {settings.config_path} now means "
            f"{os.path.abspath(settings.data_dir)} (relative to the config file's directory), "
            f"but the ingest log is in {os.path.abspath(former)} (relative to the working "
            f'directory): set data_dir = "{os.path.abspath(former)}" in the file, or move that '
            "directory there"
        )


def start_hint(settings: ExporterSettings) -> str:
    """For the landing: which catalog and warehouse it could not open, and what to check."""
    if settings.type != LAKE_EXPORTER_TYPE:
        return ""
    options = settings.options
    path = options.get("path")
    try:
        location = lake_location(options, Path(path) if isinstance(path, str) else None)
    except ValueError:
        return ""
    catalog = location.catalog.get("uri", location.catalog.get("type", "?"))
    return (
        f" (catalog {catalog}, warehouse {location.warehouse}): check [lake] catalog and "
        "warehouse, that the catalog is reachable and that this user can write there"
    )


def cannot_listen(listener: str, host: str, port: int, error: OSError) -> StartupError:
    reason = os.strerror(error.errno) if error.errno and error.errno > 0 else str(error)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return StartupError(
        f"the {listener} listener ({listener}.listen) cannot listen on {address}: {reason}"
    )


def describe_exporter(settings: ExporterSettings) -> str:
    """``name(type path)``: the startup line names every path the server writes to."""
    path = settings.options.get("path")
    where = f" {os.path.abspath(path)}" if isinstance(path, str) else ""
    return f"{settings.name}({settings.type}{where})"


#: The metric prefixes of Kafka's producer and consumer clients (KIP-714's names).
CLIENT_KIND_PREFIXES = {
    "producer": "org.apache.kafka.producer.",
    "consumer": "org.apache.kafka.consumer.",
}


def describe_subscriptions(subscriptions: Iterable[Subscription]) -> str:
    """``name[prefix|prefix]@interval``: what every subscription in force asks for."""
    described = [
        f"{s.name}[{'|'.join(s.metrics) or 'no metrics'}]@{s.interval_ms}ms"
        for s in sorted(subscriptions, key=lambda s: s.name)
    ]
    return ",".join(described) or "none(clients push nothing)"


def _asks_for(subscription: Subscription, prefix: str) -> bool:
    return subscription.all_metrics or any(
        prefix.startswith(m) or m.startswith(prefix) for m in subscription.metrics
    )


def warn_about_unmatched_kinds(settings: Settings) -> None:
    """A file whose subscriptions ask no producer (or consumer) metric collects none of them."""
    if settings.config_path is None:
        return  # the embedded default asks for every org.apache.kafka. metric
    for kind, prefix in CLIENT_KIND_PREFIXES.items():
        if not any(_asks_for(s, prefix) for s in settings.subscriptions):
            _log.warning(
                "no subscription in %s matches the %s metrics (%s...): %s clients push none of "
                "them (a client that no subscription matches pushes nothing); add a "
                '[subscriptions.NAME] with metrics = ["%s"] to collect them',
                settings.config_path,
                kind,
                prefix,
                kind,
                prefix,
            )


def tls_context(listener: str, settings: TlsSettings | None) -> ssl.SSLContext | None:
    """The listener's TLS context; a certificate or key that does not load stops the start."""
    if settings is None:
        return None
    try:
        return server_context(settings)
    except (ssl.SSLError, OSError) as error:
        raise StartupError(
            f"{listener}.tls: cannot load {settings.certfile} / {settings.keyfile}"
            f"{f' / {settings.cafile}' if settings.cafile else ''}: {error}"
        ) from error


def describe_security(settings: SecuritySettings) -> str:
    """The startup line's ``security=`` part: what protects the listeners."""
    if not settings.enabled:
        return "none(every principal may read and alter)"
    parts = []
    if settings.sasl_enabled:
        parts.append("sasl=" + "+".join(settings.sasl_mechanisms))
    if settings.kafka_tls is not None:
        parts.append("kafka_tls" + ("+client_certs" if settings.kafka_tls.cafile else ""))
    if settings.http_tls is not None:
        parts.append("http_tls" + ("+client_certs" if settings.http_tls.cafile else ""))
    parts.append(f"anonymous={'allowed' if settings.allow_anonymous else 'refused'}")
    return ",".join(parts)


def warn_about_exposure(settings: Settings) -> None:
    """Say at start what an unauthenticated peer can reach (docs/security.md)."""
    security = settings.security
    if not security.enabled:
        exposed = [
            f"{name}={host}"
            for name, host in (("kafka", settings.kafka.host), ("http", settings.http_host))
            if not is_loopback(host)
        ]
        if exposed:
            _log.warning(
                "listening beyond loopback (%s) without [security]: any peer that can "
                "connect may push telemetry and alter SCRAM credentials (docs/security.md)",
                ", ".join(exposed),
            )
