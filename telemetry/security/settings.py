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
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from telemetry.security.plain import PLAIN
from telemetry.security.scram import ScramMechanism

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

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
