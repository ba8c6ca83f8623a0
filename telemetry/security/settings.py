"""``[security]``, ``[kafka.tls]`` and ``[http.tls]``: who may connect, and how they prove it.

No ``[security]`` section (the embedded default) means no SASL and every
connection is ``User:ANONYMOUS``, as a Kafka PLAINTEXT listener without an
authorizer. A ``[security]`` section turns SASL on (by default all three
mechanisms) and, unless it says otherwise, refuses connections that do not
authenticate.

PLAIN users come from the file. A secret is kept only as a salted PBKDF2
hash: written in the file either in plain text (hashed at load) or already
hashed as ``pbkdf2_sha256$<iterations>$<base64 salt>$<base64 hash>`` (the
format Django uses; :func:`hash_password` makes one).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from telemetry import toml_checks as toml
from telemetry.errors import ConfigError
from telemetry.security.plain import PLAIN
from telemetry.security.scram import ScramMechanism

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Every mechanism kip714 serves, in the order SaslHandshake lists them.
SASL_MECHANISMS: Final = (
    PLAIN,
    ScramMechanism.SCRAM_SHA_256.mechanism_name,
    ScramMechanism.SCRAM_SHA_512.mechanism_name,
)
PASSWORD_HASH_PREFIX: Final = "pbkdf2_sha256"
#: Iterations of a hash made from a plain-text secret at load (OWASP's 2023 figure
#: for PBKDF2-HMAC-SHA256 is 600 000; PLAIN checks run once per connection).
DEFAULT_HASH_ITERATIONS: Final = 100_000
_MIN_HASH_ITERATIONS: Final = 1000


@dataclass(frozen=True, slots=True)
class PasswordHash:
    """A salted PBKDF2-HMAC-SHA256 hash of a PLAIN user's secret."""

    iterations: int
    salt: bytes
    digest: bytes = field(repr=False)

    def matches(self, password: str) -> bool:
        candidate = hashlib.pbkdf2_hmac(
            "sha256", password.encode("utf-8"), self.salt, self.iterations
        )
        return hmac.compare_digest(candidate, self.digest)

    def encoded(self) -> str:
        salt = base64.b64encode(self.salt).decode("ascii")
        digest = base64.b64encode(self.digest).decode("ascii")
        return f"{PASSWORD_HASH_PREFIX}${self.iterations}${salt}${digest}"


def hash_password(password: str, *, iterations: int = DEFAULT_HASH_ITERATIONS) -> PasswordHash:
    """A new hash of ``password`` with a random 16-byte salt."""
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return PasswordHash(iterations, salt, digest)


def parse_password(value: str) -> PasswordHash:
    """A ``pbkdf2_sha256$…`` hash as is; anything else is a plain-text secret, hashed now.

    Raises:
        ValueError: the value starts like a hash but is not a valid one.
    """
    if not value.startswith(PASSWORD_HASH_PREFIX + "$"):
        return hash_password(value)
    parts = value.split("$")
    if len(parts) != 4:
        raise ValueError(f"expected {PASSWORD_HASH_PREFIX}$<iterations>$<salt>$<hash>")
    try:
        iterations = int(parts[1])
        salt = base64.b64decode(parts[2], validate=True)
        digest = base64.b64decode(parts[3], validate=True)
    except (ValueError, binascii.Error):
        raise ValueError("the iterations, salt or hash do not parse") from None
    if iterations < _MIN_HASH_ITERATIONS or not salt or len(digest) != 32:
        raise ValueError(
            f"expected at least {_MIN_HASH_ITERATIONS} iterations, a salt and a 32-byte hash"
        )
    return PasswordHash(iterations, salt, digest)


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsSettings:
    """A listener's certificate chain and key; ``cafile`` asks clients for certificates."""

    certfile: Path
    keyfile: Path
    cafile: Path | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SecuritySettings:
    """What ``[security]`` and the listeners' ``tls`` tables say."""

    #: Whether the file has a ``[security]`` section at all.
    configured: bool = False
    sasl_mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, PasswordHash] = field(default_factory=lambda: MappingProxyType({}))
    #: Whether a connection that never authenticates may push (as ``User:ANONYMOUS``).
    allow_anonymous: bool = True
    #: KIP-368 ``connections.max.reauth.ms``: 0 = sessions never expire.
    connections_max_reauth_ms: int = 0
    #: ``User:<name>`` principals allowed every admin operation.
    super_users: tuple[str, ...] = ()
    #: Threads that compute password hashes (PLAIN, HTTP Basic): the CPU a flood can take.
    password_check_threads: int = 1
    #: Checks that may wait for a password-check thread; over it HTTP Basic answers 503.
    password_check_queue: int = 32
    #: Kafka's ``connection.failed.authentication.delay.ms``: a failure is answered this late.
    failed_authentication_delay_ms: int = 100
    kafka_tls: TlsSettings | None = None
    http_tls: TlsSettings | None = None

    @property
    def sasl_enabled(self) -> bool:
        return bool(self.sasl_mechanisms)

    @property
    def enabled(self) -> bool:
        """Anything beyond the open default: SASL, TLS, or a ``[security]`` section."""
        return self.configured or self.kafka_tls is not None or self.http_tls is not None


_SECURITY_KEYS = {
    "sasl_mechanisms",
    "plain_users",
    "allow_anonymous",
    "connections_max_reauth_ms",
    "super_users",
    "password_check_threads",
    "password_check_queue",
    "failed_authentication_delay_ms",
}


def parse_security(
    document: Mapping[str, Any], kafka: Mapping[str, Any], http: Mapping[str, Any]
) -> SecuritySettings:
    """``[security]`` plus ``[kafka.tls]`` / ``[http.tls]``; docs/security.md has the defaults."""
    kafka_tls = _tls("kafka.tls", kafka["tls"]) if "tls" in kafka else None
    http_tls = _tls("http.tls", http["tls"]) if "tls" in http else None
    if "security" not in document:
        return SecuritySettings(kafka_tls=kafka_tls, http_tls=http_tls)
    found = toml.section("security", document, _SECURITY_KEYS)
    mechanisms = toml.string_list(
        "security.sasl_mechanisms", found.get("sasl_mechanisms", list(SASL_MECHANISMS))
    )
    for mechanism in mechanisms:
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                "security.sasl_mechanisms",
                mechanisms,
                f"unknown mechanism {mechanism!r} (known: {', '.join(SASL_MECHANISMS)})",
            )
    plain_users = {}
    for name, secret in toml.table("security.plain_users", found.get("plain_users", {})).items():
        key = f"security.plain_users.{name}"
        try:
            plain_users[name] = parse_password(toml.string(key, secret))
        except ValueError as error:
            raise ConfigError(key, "<hidden>", str(error)) from None
    allow_anonymous = found.get("allow_anonymous", not mechanisms)
    if not isinstance(allow_anonymous, bool):
        raise ConfigError("security.allow_anonymous", allow_anonymous, "expected true or false")
    client_certificates = kafka_tls is not None and kafka_tls.cafile is not None
    if not allow_anonymous and not mechanisms and not client_certificates:
        raise ConfigError(
            "security.allow_anonymous",
            False,
            "nothing to authenticate with: enable sasl_mechanisms or kafka.tls.cafile",
        )
    super_users = toml.string_list("security.super_users", found.get("super_users", []))
    for principal in super_users:
        if not principal.startswith("User:") or principal == "User:":
            raise ConfigError("security.super_users", super_users, "expected User:<name> entries")
    return SecuritySettings(
        configured=True,
        sasl_mechanisms=tuple(dict.fromkeys(mechanisms)),
        plain_users=MappingProxyType(plain_users),
        allow_anonymous=allow_anonymous,
        connections_max_reauth_ms=toml.integer(
            "security.connections_max_reauth_ms", found.get("connections_max_reauth_ms", 0), 0
        ),
        super_users=tuple(super_users),
        password_check_threads=toml.integer(
            "security.password_check_threads", found.get("password_check_threads", 1), 1
        ),
        password_check_queue=toml.integer(
            "security.password_check_queue", found.get("password_check_queue", 32), 0
        ),
        failed_authentication_delay_ms=toml.integer(
            "security.failed_authentication_delay_ms",
            found.get("failed_authentication_delay_ms", 100),
            0,
        ),
        kafka_tls=kafka_tls,
        http_tls=http_tls,
    )


def _tls(key: str, value: object) -> TlsSettings:
    entries = toml.table(key, value)
    toml.refuse_unknown(key + ".", entries, {"certfile", "keyfile", "cafile"})
    paths: dict[str, Path] = {}
    for name in ("certfile", "keyfile", "cafile"):
        if name in entries:
            path = Path(toml.string(f"{key}.{name}", entries[name]))
            if not path.is_file():
                raise ConfigError(f"{key}.{name}", str(path), "no such file")
            paths[name] = path
    for name in ("certfile", "keyfile"):
        if name not in paths:
            raise ConfigError(f"{key}.{name}", None, "TLS needs a certificate and its key")
    return TlsSettings(
        certfile=paths["certfile"], keyfile=paths["keyfile"], cafile=paths.get("cafile")
    )
