"""``[meta]``: where the metadata store lives, on this node's disk or in a Kafka topic.

``store = "local"`` (the default) keeps ``<data_dir>/meta/``. ``store =
"kafka"`` shares one image among every node that names the same topic of the
same cluster; the connection keys are the Kafka client's own
(``security.protocol``, ``sasl.mechanism``, ...), spelled with underscores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from telemetry import toml_checks as toml
from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

STORES: Final = ("local", "kafka")
DEFAULT_TOPIC: Final = "_kip714_metadata"
DEFAULT_STARTUP_TIMEOUT_S: Final = 30.0
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_KEYS: Final = {
    "store",
    "bootstrap_servers",
    "topic",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_cafile",
    "startup_timeout_s",
}
#: Kafka's topic name rule (``Topic.validate``): legal characters and at most 249 of them.
_TOPIC_CHARACTERS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
)
_MAX_TOPIC_LENGTH: Final = 249


@dataclass(frozen=True, slots=True, kw_only=True)
class MetaSettings:
    store: str = "local"
    bootstrap_servers: str | None = None
    topic: str = DEFAULT_TOPIC
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: Path | None = None
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S

    def client_config(self) -> dict[str, str]:
        """The librdkafka settings every client of the topic shares."""
        assert self.bootstrap_servers is not None  # parse_meta requires it for "kafka"
        config = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism is not None:
            config["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            config["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            config["sasl.password"] = self.sasl_password
        if self.ssl_cafile is not None:
            config["ssl.ca.location"] = str(self.ssl_cafile)
        return config


def parse_meta(section: Mapping[str, Any]) -> MetaSettings:
    """The ``[meta]`` table (empty when absent); unknown keys and bad values are refused."""
    toml.refuse_unknown("meta.", section, set(_KEYS))
    store = _choice("meta.store", section.get("store", "local"), STORES)
    if store == "local":
        extra = sorted(set(section) - {"store"})
        if extra:
            raise ConfigError(
                f"meta.{extra[0]}", section[extra[0]], 'applies only to store = "kafka"'
            )
        return MetaSettings()
    if "bootstrap_servers" not in section:
        raise ConfigError("meta.bootstrap_servers", None, 'store = "kafka" needs HOST:PORT[,...]')
    bootstrap = toml.string("meta.bootstrap_servers", section["bootstrap_servers"])
    topic = toml.string("meta.topic", section.get("topic", DEFAULT_TOPIC))
    if (
        topic in {".", ".."}
        or len(topic) > _MAX_TOPIC_LENGTH
        or not set(topic) <= _TOPIC_CHARACTERS
    ):
        raise ConfigError("meta.topic", topic, "not a legal Kafka topic name")
    protocol = _choice(
        "meta.security_protocol",
        str(section.get("security_protocol", "PLAINTEXT")).upper(),
        SECURITY_PROTOCOLS,
    )
    mechanism, username, password = _sasl(section, protocol)
    cafile: Path | None = None
    if "ssl_cafile" in section:
        cafile = Path(toml.string("meta.ssl_cafile", section["ssl_cafile"]))
        if not cafile.is_file():
            raise ConfigError("meta.ssl_cafile", str(cafile), "no such file")
    timeout = section.get("startup_timeout_s", DEFAULT_STARTUP_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigError("meta.startup_timeout_s", timeout, "expected a positive number")
    return MetaSettings(
        store=store,
        bootstrap_servers=bootstrap,
        topic=topic,
        security_protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_username=username,
        sasl_password=password,
        ssl_cafile=cafile,
        startup_timeout_s=float(timeout),
    )


def _sasl(section: Mapping[str, Any], protocol: str) -> tuple[str | None, str | None, str | None]:
    mechanism = section.get("sasl_mechanism")
    if mechanism is not None:
        mechanism = _choice("meta.sasl_mechanism", str(mechanism).upper(), SASL_MECHANISMS)
    username = _optional_string(section, "sasl_username")
    password = _optional_string(section, "sasl_password")
    if protocol.startswith("SASL_"):
        if mechanism is None or username is None or password is None:
            raise ConfigError(
                "meta.security_protocol",
                protocol,
                "SASL needs sasl_mechanism, sasl_username and sasl_password",
            )
    elif mechanism is not None or username is not None or password is not None:
        raise ConfigError("meta.sasl_mechanism", mechanism, f"{protocol} does not use SASL")
    return mechanism, username, password


def _choice(key: str, value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(key, value, f"expected one of {', '.join(choices)}")
    return value


def _optional_string(section: Mapping[str, Any], name: str) -> str | None:
    if name not in section:
        return None
    value = section[name]
    if not isinstance(value, str) or not value:
        shown = "<hidden>" if name == "sasl_password" else value
        raise ConfigError(f"meta.{name}", shown, "expected a non-empty string")
    return value
