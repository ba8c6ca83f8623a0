"""Settings for ``kip714 serve``: embedded defaults, then a TOML file, then flags.

Everything has a default, so the server runs with no file at all. A file's
``[subscriptions]`` *replace* the embedded one (Kafka's rule: a client gets
only the subscriptions that match it), while ``[exporters]`` *add* to the
default Iceberg landing: adding a Prometheus scrape must not stop the lake.
The landing is left out only when ``[exporters.landing] enabled = false``
turns it off or the file names an ``iceberg`` exporter of its own. Unknown
keys and invalid values are refused at start with one ``ConfigError``
naming the dotted key and the value, because a typo that is silently
ignored is a limit that silently does not apply.

The embedded default subscription asks every client for the standard KIP-714
metrics (``org.apache.kafka.``) once a minute: minute-level pushes match the
finest rollup window, and Kafka's own 5-minute default is too coarse for
request-latency questions.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporters.iceberg.settings import lake_location
from exporters.registry import RETIRED
from health_rules import RulesError, load_rules
from telemetry import toml_checks as toml
from telemetry.admin.settings import AdminSettings, parse_admin
from telemetry.core.settings import (
    OTLP_LIMIT_KEYS,
    TelemetryConfig,
    parse_subscriptions,
    parse_telemetry,
)
from telemetry.core.subscriptions import Subscription, validate_subscription
from telemetry.enforcement import LimitSettings, QuotaSettings, parse_limits, parse_quotas
from telemetry.errors import ConfigError
from telemetry.http.settings import (
    HTTP_LIMIT_KEYS,
    ForwardSettings,
    HttpLimits,
    parse_forward,
    parse_http_limits,
)
from telemetry.ingest import LogConfig
from telemetry.ingest.config import parse_log
from telemetry.kafka.settings import (
    KafkaListenerConfig,
    parse_kafka,
    refuse_unspecified_advertised,
)
from telemetry.metastore.settings import MetaSettings, parse_meta
from telemetry.security.settings import SecuritySettings, parse_security
from telemetry.server.config_paths import resolve_relative_paths
from telemetry.server.lake_settings import LAKE_EXPORTER_TYPE, lake_options

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

DEFAULT_DATA_DIR = "./kip714-data"
DEFAULT_HTTP_LISTEN = "127.0.0.1:8714"
DEFAULT_EXPORTER_NAME = "landing"
#: The built-in exporter every config gets unless it turns it off or names an
#: ``iceberg`` exporter: the Iceberg landing, its lake under ``<data_dir>/lake/``
#: unless ``[lake]`` says otherwise. Its name is reserved for it.
DEFAULT_EXPORTER_TYPE = LAKE_EXPORTER_TYPE
#: Where a built-in exporter whose options give no ``path`` writes, under the
#: data directory: ``--data-dir`` moves everything not given an explicit path.
_DEFAULT_PATHS: dict[str, Callable[[Path, str], Path]] = {
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
    #: ``[http] header_timeout_ms``, ``body_timeout_ms``, ``memory_wait_ms``.
    http: HttpLimits = field(default_factory=HttpLimits)
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
    #: ``[alerts] rules``: the health rules file replacing the shipped one (``health_rules``).
    alert_rules: Path | None = None
    #: Where the file's relative ``data_dir`` pointed before config paths were
    #: relative to the file (the working directory); ``None`` when that rule
    #: cannot differ (no file, an absolute path, or ``--data-dir`` given).
    former_data_dir: Path | None = None

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
    raw_data_dir = document.get("data_dir")
    if path is not None:
        document = resolve_relative_paths(document, Path(path))
    settings = settings_from_mapping(document)
    if path is not None:
        settings = replace(settings, config_path=Path(path))
        if isinstance(raw_data_dir, str) and not Path(raw_data_dir).is_absolute():
            settings = replace(settings, former_data_dir=Path(raw_data_dir))
    if data_dir is not None:
        settings = _with_data_dir(settings, Path(data_dir), document)
    if kafka_listen is not None:
        host, port = toml.parse_host_port("--kafka-listen", kafka_listen)
        settings = replace(settings, kafka=replace(settings.kafka, host=host, port=port))
    if http_listen is not None:
        host, port = toml.parse_host_port("--http-listen", http_listen)
        settings = replace(settings, http_host=host, http_port=port)
    refuse_unspecified_advertised(settings.kafka)
    return settings


def settings_from_mapping(document: Mapping[str, Any]) -> Settings:
    toml.refuse_unknown(
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
            "alerts",
        },
    )
    data_dir = Path(toml.string("data_dir", document.get("data_dir", DEFAULT_DATA_DIR)))
    subscriptions = (
        parse_subscriptions(toml.table("subscriptions", document["subscriptions"]))
        if "subscriptions" in document
        else default_subscriptions()
    )
    exporters = _exporters_in(document, data_dir)
    http_section = toml.section("http", document, {"listen", "tls", *HTTP_LIMIT_KEYS})
    http_host, http_port = toml.parse_host_port(
        "http.listen", http_section.get("listen", DEFAULT_HTTP_LISTEN)
    )
    kafka_section = toml.section(
        "kafka", document, {"listen", "advertised", "max_frame_bytes", "tls"}
    )
    kafka = parse_kafka(kafka_section)
    security = parse_security(document, kafka_section, http_section)
    limits = parse_limits(toml.table("limits", document.get("limits", {})))
    if limits.queued_max_request_bytes < kafka.max_frame_bytes + 4:
        # A frame the pool cannot hold whole could never be read.
        raise ConfigError(
            "limits.queued_max_request_bytes",
            limits.queued_max_request_bytes,
            f"must hold at least one maximal frame (kafka.max_frame_bytes + 4 = "
            f"{kafka.max_frame_bytes + 4})",
        )
    http = parse_http_limits(http_section)
    admin = parse_admin(
        toml.table("admin", document["admin"]) if "admin" in document else None, security
    )
    if http.metrics_auth == "admin" and admin.token is None:
        raise ConfigError("http.metrics_auth", "admin", "needs [admin] token (the bearer token)")
    meta = parse_meta(toml.table("meta", document.get("meta", {})))
    return Settings(
        data_dir=data_dir,
        kafka=kafka,
        http_host=http_host,
        http_port=http_port,
        http=http,
        telemetry=parse_telemetry(
            toml.section(
                "telemetry",
                document,
                {
                    "max_bytes",
                    "max_decompressed_bytes",
                    "instance_cache_size",
                    "instance_cache_expiry_ms",
                    *OTLP_LIMIT_KEYS,
                },
            )
        ),
        log=parse_log(toml.table("log", document.get("log", {})), meta),
        subscriptions=subscriptions,
        exporters=exporters,
        rollups_retention_hours=_retention_hours(
            "rollups.retention_hours", toml.section("rollups", document, {"retention_hours"})
        ),
        quotas=parse_quotas(toml.table("quotas", document.get("quotas", {}))),
        limits=limits,
        forward=parse_forward(toml.section("forward", document, {"token", "max_request_bytes"})),
        admin=admin,
        security=security,
        meta=meta,
        alert_rules=alert_rules_in(document),
    )


def alert_rules_in(document: Mapping[str, Any]) -> Path | None:
    """``[alerts] rules``: a rules file replacing the shipped one, checked whole at start."""
    section = toml.section("alerts", document, {"rules"})
    if "rules" not in section:
        return None
    path = Path(toml.string("alerts.rules", section["rules"]))
    try:
        load_rules(path)
    except RulesError as error:
        raise ConfigError("alerts.rules", str(path), str(error)) from None
    return path


def _with_data_dir(settings: Settings, data_dir: Path, document: Mapping[str, Any]) -> Settings:
    """``--data-dir`` moves the log and every exporter the file gave no explicit path."""
    return replace(
        settings,
        data_dir=data_dir,
        exporters=_exporters_in(document, data_dir),
        former_data_dir=None,
    )


def _exporters_in(document: Mapping[str, Any], data_dir: Path) -> tuple[ExporterSettings, ...]:
    table = toml.table("exporters", document.get("exporters", {}))
    exporters = list(_exporters(table, data_dir))
    named_iceberg = DEFAULT_EXPORTER_NAME in table or any(
        isinstance(raw, dict) and raw.get("type") == LAKE_EXPORTER_TYPE for raw in table.values()
    )
    if not named_iceberg:
        exporters = [*default_exporters(data_dir), *exporters]
    # [lake] and [server] node_id are the options of every iceberg landing, under its own.
    lake = lake_options(document)
    exporters = [
        replace(e, options={**lake, **e.options}) if e.type == LAKE_EXPORTER_TYPE else e
        for e in exporters
    ]
    _refuse_two_landings_on_one_table(exporters)
    return tuple(exporters)


def _refuse_two_landings_on_one_table(exporters: list[ExporterSettings]) -> None:
    """Two ``iceberg`` exporters committing to one table would land every push twice."""
    seen: dict[tuple[object, ...], str] = {}
    for exporter in exporters:
        if exporter.type != LAKE_EXPORTER_TYPE:
            continue
        options = exporter.options
        path = options.get("path")
        try:
            location = lake_location(options, Path(path) if isinstance(path, str) else None)
        except ValueError:
            continue  # the exporter refuses its own options, naming them, at start
        key = (tuple(sorted(location.catalog.items())), location.namespace)
        if key in seen:
            raise ConfigError(
                f"exporters.{exporter.name}",
                exporter.type,
                f"lands in the same table as exporters.{seen[key]} "
                f"({location.namespace}.metrics in catalog "
                f"{location.catalog.get('uri', location.catalog)}): every push would land "
                f"twice; turn one off (enabled = false) or give it its own [lake] catalog "
                f"or namespace in its options",
            )
        seen[key] = exporter.name


def _retention_hours(key: str, section: Mapping[str, Any]) -> int | None:
    value = section.get("retention_hours")
    return None if value is None else toml.integer(key, value, 1)


_EXPORTER_SECONDS = ("stall_timeout_s", "drain_timeout_s")


def _exporters(table: Mapping[str, Any], data_dir: Path) -> tuple[ExporterSettings, ...]:
    known = {
        "type",
        "enabled",
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
        exporter = toml.table(key, raw)
        toml.refuse_unknown(key + ".", exporter, known)
        if name == DEFAULT_EXPORTER_NAME:
            # Tuning the landing needs no type; the name means the landing only.
            type_name = toml.string(f"{key}.type", exporter.get("type", DEFAULT_EXPORTER_TYPE))
            if type_name in RETIRED:  # a config from before: say where its data goes now
                message = f"the exporter type {type_name!r} is retired: {RETIRED[type_name]}"
                raise ConfigError(f"{key}.type", type_name, message)
            if type_name != DEFAULT_EXPORTER_TYPE:
                raise ConfigError(
                    f"{key}.type",
                    type_name,
                    f"the name {DEFAULT_EXPORTER_NAME!r} is reserved for the Iceberg landing "
                    f"({DEFAULT_EXPORTER_TYPE!r}); give this exporter another name",
                )
        elif "type" not in exporter:
            raise ConfigError(f"{key}.type", None, "every exporter names its type (an entry point)")
        else:
            type_name = toml.string(f"{key}.type", exporter["type"])
        enabled = exporter.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigError(f"{key}.enabled", enabled, "expected true or false")
        options = dict(toml.table(f"{key}.options", exporter.get("options", {})))
        if "path" not in options and type_name in _DEFAULT_PATHS:
            options["path"] = str(_DEFAULT_PATHS[type_name](data_dir, name))
        tuning: dict[str, Any] = {
            field_name: toml.integer(f"{key}.{field_name}", exporter[field_name], 1)
            for field_name in known - {"type", "enabled", "options", *_EXPORTER_SECONDS}
            if field_name in exporter
        }
        for field_name in _EXPORTER_SECONDS:
            if field_name in exporter:
                tuning[field_name] = toml.seconds(f"{key}.{field_name}", exporter[field_name])
        if not enabled:
            continue  # checked like any other, then left out
        exporters.append(
            ExporterSettings(
                name=name,
                type=type_name,
                options=options,
                **tuning,
            )
        )
    return tuple(exporters)
