"""Settings for ``kip714 serve``: embedded defaults, then a TOML file, then flags.

Everything has a default, so the server runs with no file at all. What a file
states *replaces* that part of the defaults: a file with ``[subscriptions]``
has exactly those subscriptions, and a file without ``[exporters]`` keeps the
default exporter. Unknown keys and invalid values are refused at start with
one ``ConfigError`` naming the dotted key and the value, because a typo that
is silently ignored is a limit that silently does not apply.

The embedded default subscription asks every client for the standard KIP-714
metrics (``org.apache.kafka.``) once a minute: minute-level pushes match the
finest rollup window, and Kafka's own 5-minute default is too coarse for
request-latency questions.
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from telemetry.admin.settings import AdminSettings, parse_admin
from telemetry.enforcement import LimitSettings, QuotaSettings, parse_limits, parse_quotas
from telemetry.errors import ConfigError, TelemetryError
from telemetry.http_forward import DEFAULT_MAX_REQUEST_BYTES, ForwardSettings
from telemetry.ingest import LogConfig
from telemetry.kafka_listener import DEFAULT_MAX_FRAME_BYTES, KafkaListenerConfig
from telemetry.lake_settings import LAKE_EXPORTER_TYPE, lake_options
from telemetry.metastore.settings import MetaSettings, parse_meta
from telemetry.security.settings import (
    SASL_MECHANISMS,
    SecuritySettings,
    TlsSettings,
    parse_password,
)
from telemetry.subscriptions import Subscription, validate_subscription
from telemetry.telemetry_config import TelemetryConfig

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

DEFAULT_DATA_DIR = "./kip714-data"
DEFAULT_KAFKA_LISTEN = "127.0.0.1:9092"
DEFAULT_HTTP_LISTEN = "127.0.0.1:8714"
DEFAULT_EXPORTER_NAME = "landing"
#: The built-in exporter a config without ``[exporters]`` gets: the Iceberg
#: landing, its lake under ``<data_dir>/lake/`` unless ``[lake]`` says otherwise.
DEFAULT_EXPORTER_TYPE = LAKE_EXPORTER_TYPE
#: Where a built-in exporter whose options give no ``path`` writes, under the
#: data directory: ``--data-dir`` moves everything not given an explicit path.
_DEFAULT_PATHS: dict[str, Callable[[Path, str], Path]] = {
    "parquet": lambda data_dir, _name: data_dir,  # rows under <data_dir>/metrics/
    "iceberg": lambda data_dir, _name: data_dir,  # the lake under <data_dir>/lake/, node_id file
    "jsonl": lambda data_dir, name: data_dir / "jsonl" / f"{name}.jsonl",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ExporterSettings:
    """One ``[exporters.NAME]`` table: the plugin type, its options, and how the host feeds it."""

    name: str
    type: str
    options: Mapping[str, Any] = field(default_factory=dict)
    batch_max_records: int = 1000
    batch_max_bytes: int = 8 * 1024 * 1024
    retry_initial_ms: int = 100
    retry_max_ms: int = 30_000
    #: Readiness reports the exporter stalled when it is behind and has
    #: committed nothing for this long.
    stall_timeout_s: float = 300.0
    #: On stop, the drain and the final flush each get this long; what is not
    #: exported by then stays in the log for the next start.
    drain_timeout_s: float = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    kafka: KafkaListenerConfig = field(default_factory=KafkaListenerConfig)
    http_host: str = "127.0.0.1"
    http_port: int = 8714
    #: ``[http] header_timeout_ms`` / ``body_timeout_ms`` (telemetry.http.connections).
    http_header_timeout_ms: int = 10_000
    http_body_timeout_ms: int = 60_000
    #: ``[http] memory_wait_ms``: how long a request waits for request memory before a 503.
    http_memory_wait_ms: int = 5_000
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    log: LogConfig = field(default_factory=LogConfig)
    subscriptions: tuple[Subscription, ...] = ()
    exporters: tuple[ExporterSettings, ...] = ()
    quotas: QuotaSettings = field(default_factory=QuotaSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    config_path: Path | None = None
    #: ``[admin]`` and ``[security]``: the HTTP admin token, who may alter.
    admin: AdminSettings = field(default_factory=AdminSettings)
    #: ``[rollups] retention_hours``: delete rollup hours older than this; ``None`` keeps them.
    rollups_retention_hours: int | None = None
    #: ``[forward]``: ``POST /v1/telemetry/forward`` for the Kafka broker plugin.
    forward: ForwardSettings = field(default_factory=ForwardSettings)
    #: ``[security]``, ``[kafka.tls]``, ``[http.tls]`` (docs/security.md).
    security: SecuritySettings = field(default_factory=SecuritySettings)
    #: ``[meta]``: the metadata store, local (``<data_dir>/meta``) or a Kafka topic.
    meta: MetaSettings = field(default_factory=MetaSettings)

    @property
    def super_users(self) -> tuple[str, ...]:
        """``[security] super_users``: principals (``User:name``) allowed every admin operation."""
        return self.security.super_users

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "log"


def default_subscriptions() -> tuple[Subscription, ...]:
    default = validate_subscription(
        "default", {"metrics": ["org.apache.kafka."], "interval.ms": 60_000}
    )
    assert default is not None
    return (default,)


def default_exporters(data_dir: Path) -> tuple[ExporterSettings, ...]:
    return (
        ExporterSettings(
            name=DEFAULT_EXPORTER_NAME,
            type=DEFAULT_EXPORTER_TYPE,
            options={"path": str(data_dir)},
        ),
    )


def parse_host_port(key: str, value: object) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9092`` for IPv6); port 0 picks a free port."""
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(key, value, "expected HOST:PORT")
    host, _, port_text = value.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(key, value, "the port is not a number") from None
    if not host or not 0 <= port <= 65535:
        raise ConfigError(key, value, "expected HOST:PORT with a port in 0..65535")
    return host, port


def load_settings(
    path: str | Path | None = None,
    *,
    data_dir: str | Path | None = None,
    kafka_listen: str | None = None,
    http_listen: str | None = None,
) -> Settings:
    """Defaults, then the file at ``path`` (if any), then the flags."""
    document: dict[str, Any] = {}
    if path is not None:
        config_path = Path(path)
        try:
            with config_path.open("rb") as file:
                document = tomllib.load(file)
        except FileNotFoundError:
            raise ConfigError("--config", str(path), "no such file") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError("--config", str(path), f"not valid TOML: {error}") from None
    settings = settings_from_mapping(document)
    if path is not None:
        settings = replace(settings, config_path=Path(path))
    if data_dir is not None:
        settings = _with_data_dir(settings, Path(data_dir), document)
    if kafka_listen is not None:
        host, port = parse_host_port("--kafka-listen", kafka_listen)
        settings = replace(settings, kafka=replace(settings.kafka, host=host, port=port))
    if http_listen is not None:
        host, port = parse_host_port("--http-listen", http_listen)
        settings = replace(settings, http_host=host, http_port=port)
    _refuse_unspecified_advertised(settings.kafka)
    return settings


def settings_from_mapping(document: Mapping[str, Any]) -> Settings:
    _refuse_unknown(
        "",
        document,
        {
            "data_dir",
            "telemetry",
            "kafka",
            "http",
            "log",
            "subscriptions",
            "exporters",
            "rollups",
            "quotas",
            "limits",
            "forward",
            "admin",
            "security",
            "lake",
            "server",
            "meta",
        },
    )
    data_dir = Path(_string("data_dir", document.get("data_dir", DEFAULT_DATA_DIR)))
    subscriptions = (
        _subscriptions(_table("subscriptions", document["subscriptions"]))
        if "subscriptions" in document
        else default_subscriptions()
    )
    exporters = _exporters_in(document, data_dir)
    http_section = _section(
        "http",
        document,
        {"listen", "tls", "header_timeout_ms", "body_timeout_ms", "memory_wait_ms"},
    )
    http_host, http_port = parse_host_port(
        "http.listen", http_section.get("listen", DEFAULT_HTTP_LISTEN)
    )
    kafka_section = _section("kafka", document, {"listen", "advertised", "max_frame_bytes", "tls"})
    kafka = _kafka(kafka_section)
    security = _security(document, kafka_section, http_section)
    limits = parse_limits(_table("limits", document.get("limits", {})))
    if limits.queued_max_request_bytes < kafka.max_frame_bytes + 4:
        # A frame the pool cannot hold whole could never be read.
        raise ConfigError(
            "limits.queued_max_request_bytes",
            limits.queued_max_request_bytes,
            f"must hold at least one maximal frame (kafka.max_frame_bytes + 4 = "
            f"{kafka.max_frame_bytes + 4})",
        )
    return Settings(
        data_dir=data_dir,
        kafka=kafka,
        http_host=http_host,
        http_port=http_port,
        http_header_timeout_ms=_int(
            "http.header_timeout_ms", http_section.get("header_timeout_ms", 10_000), 1
        ),
        http_body_timeout_ms=_int(
            "http.body_timeout_ms", http_section.get("body_timeout_ms", 60_000), 1
        ),
        http_memory_wait_ms=_int(
            "http.memory_wait_ms", http_section.get("memory_wait_ms", 5_000), 0
        ),
        telemetry=_telemetry(
            _section(
                "telemetry",
                document,
                {
                    "max_bytes",
                    "max_decompressed_bytes",
                    "instance_cache_size",
                    "instance_cache_expiry_ms",
                },
            )
        ),
        log=_log(
            _section(
                "log",
                document,
                {"segment_bytes", "max_bytes", "max_record_bytes", "full_throttle_ms"},
            )
        ),
        subscriptions=subscriptions,
        exporters=exporters,
        rollups_retention_hours=_retention_hours(
            "rollups.retention_hours", _section("rollups", document, {"retention_hours"})
        ),
        quotas=parse_quotas(_table("quotas", document.get("quotas", {}))),
        limits=limits,
        forward=_forward(_section("forward", document, {"token", "max_request_bytes"})),
        admin=parse_admin(
            _table("admin", document["admin"]) if "admin" in document else None,
            _table("security", document["security"]) if "security" in document else None,
        ),
        security=security,
        meta=parse_meta(_table("meta", document.get("meta", {}))),
    )


def _forward(section: Mapping[str, Any]) -> ForwardSettings:
    token = section.get("token")
    return ForwardSettings(
        token=None if token is None else _string("forward.token", token),
        max_request_bytes=_int(
            "forward.max_request_bytes",
            section.get("max_request_bytes", DEFAULT_MAX_REQUEST_BYTES),
            1024,
        ),
    )


def _with_data_dir(settings: Settings, data_dir: Path, document: Mapping[str, Any]) -> Settings:
    """``--data-dir`` moves the log and every exporter the file gave no explicit path."""
    return replace(settings, data_dir=data_dir, exporters=_exporters_in(document, data_dir))


def _exporters_in(document: Mapping[str, Any], data_dir: Path) -> tuple[ExporterSettings, ...]:
    if "exporters" not in document:
        exporters = default_exporters(data_dir)
    else:
        exporters = _exporters(_table("exporters", document["exporters"]), data_dir)
    # [lake] and [server] node_id are the options of every iceberg landing, under its own.
    lake = lake_options(document)
    return tuple(
        replace(e, options={**lake, **e.options}) if e.type == LAKE_EXPORTER_TYPE else e
        for e in exporters
    )


def _refuse_unspecified_advertised(kafka: KafkaListenerConfig) -> None:
    """Refuse an advertised ``0.0.0.0`` or ``::``, given or defaulted, as Kafka does.

    Metadata hands the advertised address to every client, which then
    connects to it; an unspecified address only means "every interface" to a
    listening socket. Kafka's broker refuses such an ``advertised.listeners``
    entry at start for the same reason.
    """
    host = kafka.advertised_host
    if host is not None:
        if _is_unspecified(host):
            shown = f"[{host}]" if ":" in host else host
            raise ConfigError(
                "kafka.advertised",
                f"{shown}:{kafka.advertised_port}",
                "clients cannot connect to an unspecified address",
            )
    elif _is_unspecified(kafka.host):
        raise ConfigError(
            "kafka.advertised",
            None,
            f"the Kafka listener binds {kafka.host}, which clients cannot connect to; "
            "set kafka.advertised to a HOST:PORT clients can reach",
        )


def _is_unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False  # a host name


def _kafka(section: Mapping[str, Any]) -> KafkaListenerConfig:
    host, port = parse_host_port("kafka.listen", section.get("listen", DEFAULT_KAFKA_LISTEN))
    advertised_host: str | None = None
    advertised_port: int | None = None
    if "advertised" in section:
        advertised_host, advertised_port = parse_host_port(
            "kafka.advertised", section["advertised"]
        )
        if advertised_port == 0:
            raise ConfigError("kafka.advertised", section["advertised"], "the port cannot be 0")
    max_frame = _int(
        "kafka.max_frame_bytes", section.get("max_frame_bytes", DEFAULT_MAX_FRAME_BYTES), 1024
    )
    return KafkaListenerConfig(
        host=host,
        port=port,
        advertised_host=advertised_host,
        advertised_port=advertised_port,
        max_frame_bytes=max_frame,
    )


_SECURITY_KEYS = {
    "sasl_mechanisms",
    "plain_users",
    "allow_anonymous",
    "connections_max_reauth_ms",
    "super_users",
    "password_check_threads",
    "failed_authentication_delay_ms",
}


def _security(
    document: Mapping[str, Any], kafka: Mapping[str, Any], http: Mapping[str, Any]
) -> SecuritySettings:
    """``[security]`` plus ``[kafka.tls]`` / ``[http.tls]``; docs/security.md has the defaults."""
    kafka_tls = _tls("kafka.tls", kafka["tls"]) if "tls" in kafka else None
    http_tls = _tls("http.tls", http["tls"]) if "tls" in http else None
    if "security" not in document:
        return SecuritySettings(kafka_tls=kafka_tls, http_tls=http_tls)
    section = _section("security", document, _SECURITY_KEYS)
    mechanisms = _string_list(
        "security.sasl_mechanisms", section.get("sasl_mechanisms", list(SASL_MECHANISMS))
    )
    for mechanism in mechanisms:
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                "security.sasl_mechanisms",
                mechanisms,
                f"unknown mechanism {mechanism!r} (known: {', '.join(SASL_MECHANISMS)})",
            )
    plain_users = {}
    for name, secret in _table("security.plain_users", section.get("plain_users", {})).items():
        key = f"security.plain_users.{name}"
        try:
            plain_users[name] = parse_password(_string(key, secret))
        except ValueError as error:
            raise ConfigError(key, "<hidden>", str(error)) from None
    allow_anonymous = section.get("allow_anonymous", not mechanisms)
    if not isinstance(allow_anonymous, bool):
        raise ConfigError("security.allow_anonymous", allow_anonymous, "expected true or false")
    client_certificates = kafka_tls is not None and kafka_tls.cafile is not None
    if not allow_anonymous and not mechanisms and not client_certificates:
        raise ConfigError(
            "security.allow_anonymous",
            False,
            "nothing to authenticate with: enable sasl_mechanisms or kafka.tls.cafile",
        )
    super_users = _string_list("security.super_users", section.get("super_users", []))
    for principal in super_users:
        if not principal.startswith("User:") or principal == "User:":
            raise ConfigError("security.super_users", super_users, "expected User:<name> entries")
    return SecuritySettings(
        configured=True,
        sasl_mechanisms=tuple(dict.fromkeys(mechanisms)),
        plain_users=MappingProxyType(plain_users),
        allow_anonymous=allow_anonymous,
        connections_max_reauth_ms=_int(
            "security.connections_max_reauth_ms", section.get("connections_max_reauth_ms", 0), 0
        ),
        super_users=tuple(super_users),
        password_check_threads=_int(
            "security.password_check_threads", section.get("password_check_threads", 1), 1
        ),
        failed_authentication_delay_ms=_int(
            "security.failed_authentication_delay_ms",
            section.get("failed_authentication_delay_ms", 100),
            0,
        ),
        kafka_tls=kafka_tls,
        http_tls=http_tls,
    )


def _tls(key: str, value: object) -> TlsSettings:
    table = _table(key, value)
    _refuse_unknown(key + ".", table, {"certfile", "keyfile", "cafile"})
    paths: dict[str, Path] = {}
    for name in ("certfile", "keyfile", "cafile"):
        if name in table:
            path = Path(_string(f"{key}.{name}", table[name]))
            if not path.is_file():
                raise ConfigError(f"{key}.{name}", str(path), "no such file")
            paths[name] = path
    for name in ("certfile", "keyfile"):
        if name not in paths:
            raise ConfigError(f"{key}.{name}", None, "TLS needs a certificate and its key")
    return TlsSettings(
        certfile=paths["certfile"], keyfile=paths["keyfile"], cafile=paths.get("cafile")
    )


def _string_list(key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(key, value, "expected a list of non-empty strings")
    return list(value)


def _telemetry(section: Mapping[str, Any]) -> TelemetryConfig:
    values = {key: _int(f"telemetry.{key}", value, None) for key, value in section.items()}
    return TelemetryConfig(**values)


def _log(section: Mapping[str, Any]) -> LogConfig:
    values = {key: _int(f"log.{key}", value, 0) for key, value in section.items()}
    try:
        return LogConfig(**values)
    except ValueError as error:
        key = next(iter(values), "log")
        raise ConfigError(f"log.{key}", values.get(key), str(error)) from None


def _retention_hours(key: str, section: Mapping[str, Any]) -> int | None:
    value = section.get("retention_hours")
    return None if value is None else _int(key, value, 1)


def _subscriptions(table: Mapping[str, Any]) -> tuple[Subscription, ...]:
    subscriptions = []
    for name, properties in table.items():
        key = f"subscriptions.{name}"
        if not isinstance(properties, dict):
            raise ConfigError(key, properties, "expected a table of metrics, interval.ms, match")
        try:
            subscription = validate_subscription(name, properties)
        except TelemetryError as error:
            raise ConfigError(key, dict(properties), str(error)) from None
        if subscription is None:
            raise ConfigError(key, {}, "an empty subscription subscribes to nothing")
        subscriptions.append(subscription)
    return tuple(subscriptions)


_EXPORTER_SECONDS = ("stall_timeout_s", "drain_timeout_s")


def _exporters(table: Mapping[str, Any], data_dir: Path) -> tuple[ExporterSettings, ...]:
    known = {
        "type",
        "options",
        "batch_max_records",
        "batch_max_bytes",
        "retry_initial_ms",
        "retry_max_ms",
        *_EXPORTER_SECONDS,
    }
    exporters = []
    for name, raw in table.items():
        key = f"exporters.{name}"
        exporter = _table(key, raw)
        _refuse_unknown(key + ".", exporter, known)
        if "type" not in exporter:
            raise ConfigError(f"{key}.type", None, "every exporter names its type (an entry point)")
        type_name = _string(f"{key}.type", exporter["type"])
        options = dict(_table(f"{key}.options", exporter.get("options", {})))
        if "path" not in options and type_name in _DEFAULT_PATHS:
            options["path"] = str(_DEFAULT_PATHS[type_name](data_dir, name))
        tuning: dict[str, Any] = {
            field_name: _int(f"{key}.{field_name}", exporter[field_name], 1)
            for field_name in known - {"type", "options", *_EXPORTER_SECONDS}
            if field_name in exporter
        }
        for field_name in _EXPORTER_SECONDS:
            if field_name in exporter:
                tuning[field_name] = _seconds(f"{key}.{field_name}", exporter[field_name])
        exporters.append(
            ExporterSettings(
                name=name,
                type=type_name,
                options=options,
                **tuning,
            )
        )
    return tuple(exporters)


def _section(name: str, document: Mapping[str, Any], known: set[str]) -> Mapping[str, Any]:
    section = _table(name, document.get(name, {}))
    _refuse_unknown(name + ".", section, known)
    return section


def _refuse_unknown(prefix: str, table: Mapping[str, Any], known: set[str]) -> None:
    for key in table:
        if key not in known:
            raise ConfigError(
                f"{prefix}{key}", table[key], f"unknown key (known: {', '.join(sorted(known))})"
            )


def _table(key: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(key, value, "expected a table")
    return value


def _string(key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(key, value, "expected a non-empty string")
    return value


def _seconds(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(key, value, "expected a positive number of seconds")
    return float(value)


def _int(key: str, value: object, minimum: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, value, "expected an integer")
    if minimum is not None and value < minimum:
        raise ConfigError(key, value, f"must be at least {minimum}")
    return value
