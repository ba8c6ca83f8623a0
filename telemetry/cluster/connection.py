"""The connection keys of a store in the user's Kafka cluster, parsed as every section spells them.

The keys are the Kafka client's own (``security.protocol``,
``sasl.mechanism``, ...), spelled with underscores; ``[meta]`` and ``[log]``
take the same ones and refuse the same bad values, each under its own name.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from telemetry import toml_checks as toml
from telemetry.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_STARTUP_TIMEOUT_S: Final = 30.0
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's topic name rule (``Topic.validate``): legal characters and at most 249 of them.
_TOPIC_CHARACTERS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
)
_MAX_TOPIC_LENGTH: Final = 249


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConnection:
    """How a store reaches the cluster, and how long a start may wait for it."""

    bootstrap_servers: str | None = None
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: Path | None = None
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S

    def client_config(self) -> dict[str, str]:
        """The librdkafka settings every client of the store shares."""
        assert self.bootstrap_servers is not None  # the parsers require it for "kafka"
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

    def connection(self) -> ClusterConnection:
        """Only the connection keys (a subclass's other fields dropped)."""
        return ClusterConnection(**{key: getattr(self, key) for key in CONNECTION_KEYS})


#: The keys :func:`parse_connection` reads: the fields of :class:`ClusterConnection`.
CONNECTION_KEYS: Final = frozenset(field.name for field in fields(ClusterConnection))


def parse_connection(room: str, section: Mapping[str, Any]) -> dict[str, Any]:
    """The connection fields of ``[room]`` (``bootstrap_servers`` required), checked.

    Returned as keyword arguments, so a settings class that extends
    :class:`ClusterConnection` takes them with its own fields.
    """
    if "bootstrap_servers" not in section:
        raise ConfigError(
            f"{room}.bootstrap_servers", None, 'store = "kafka" needs HOST:PORT[,...]'
        )
    bootstrap = toml.string(f"{room}.bootstrap_servers", section["bootstrap_servers"])
    protocol = choice(
        f"{room}.security_protocol",
        str(section.get("security_protocol", "PLAINTEXT")).upper(),
        SECURITY_PROTOCOLS,
    )
    mechanism, username, password = _sasl(room, section, protocol)
    cafile: Path | None = None
    if "ssl_cafile" in section:
        cafile = Path(toml.string(f"{room}.ssl_cafile", section["ssl_cafile"]))
        if not cafile.is_file():
            raise ConfigError(f"{room}.ssl_cafile", str(cafile), "no such file")
    return {
        "bootstrap_servers": bootstrap,
        "security_protocol": protocol,
        "sasl_mechanism": mechanism,
        "sasl_username": username,
        "sasl_password": password,
        "ssl_cafile": cafile,
        "startup_timeout_s": startup_timeout(room, section),
    }


def startup_timeout(room: str, section: Mapping[str, Any]) -> float:
    timeout = section.get("startup_timeout_s", DEFAULT_STARTUP_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigError(f"{room}.startup_timeout_s", timeout, "expected a positive number")
    return float(timeout)


def topic_name(key: str, value: object) -> str:
    """A legal Kafka topic name (``Topic.validate``'s rule)."""
    topic = toml.string(key, value)
    if (
        topic in {".", ".."}
        or len(topic) > _MAX_TOPIC_LENGTH
        or not set(topic) <= _TOPIC_CHARACTERS
    ):
        raise ConfigError(key, topic, "not a legal Kafka topic name")
    return topic


def choice(key: str, value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(key, value, f"expected one of {', '.join(choices)}")
    return value


def _sasl(
    room: str, section: Mapping[str, Any], protocol: str
) -> tuple[str | None, str | None, str | None]:
    mechanism = section.get("sasl_mechanism")
    if mechanism is not None:
        mechanism = choice(f"{room}.sasl_mechanism", str(mechanism).upper(), SASL_MECHANISMS)
    username = _optional_string(room, section, "sasl_username")
    password = _optional_string(room, section, "sasl_password")
    if protocol.startswith("SASL_"):
        if mechanism is None or username is None or password is None:
            raise ConfigError(
                f"{room}.security_protocol",
                protocol,
                "SASL needs sasl_mechanism, sasl_username and sasl_password",
            )
    elif mechanism is not None or username is not None or password is not None:
        raise ConfigError(f"{room}.sasl_mechanism", mechanism, f"{protocol} does not use SASL")
    return mechanism, username, password


def _optional_string(room: str, section: Mapping[str, Any], name: str) -> str | None:
    if name not in section:
        return None
    value = section[name]
    if not isinstance(value, str) or not value:
        shown = "<hidden>" if name == "sasl_password" else value
        raise ConfigError(f"{room}.{name}", shown, "expected a non-empty string")
    return value
