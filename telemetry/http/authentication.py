"""Who sends an HTTP ingestion request: a client certificate, or ``Authorization: Basic``.

The principal, not the door, decides the quota entity. On the Kafka listener
a client proves who it is with SASL or a certificate; on the HTTP ingestion
routes (``/v1/metrics``, ``/v1/telemetry/subscriptions``, ``/v1/telemetry/push``)
with a certificate (``[http.tls] cafile``) or ``Authorization: Basic``,
checked against the same PLAIN users (``[security.plain_users]``) and SCRAM
credentials (the metadata store) SASL uses. OTel SDKs send the header through
``OTEL_EXPORTER_OTLP_HEADERS="Authorization=Basic <base64 user:password>"``.

* A request with Basic credentials is served as that user if they check,
  else answered 401 after ``failed_authentication_delay_ms``, and its
  connection closed (the rest of its body read first, so the client reads
  the 401 rather than a reset): a client guessing passwords pays a new
  connection per guess;
* with ``[security]`` and ``allow_anonymous = false`` a request with neither
  a certificate nor Basic credentials is answered 401, charged to nobody (no
  quota is touched: the sender is not known);
* otherwise it is ``User:ANONYMOUS`` (or the certificate's subject).

A Basic client sends its password on every request, and a check is one
password hash (tens of milliseconds, on the password-check pool, never the
event loop): hashing each request would cap all Basic clients together at a
few tens of requests per second. So a credential that checked is remembered
for :data:`MEMO_TTL_S` (at most :data:`MEMO_MAX_ENTRIES` of them), keyed by
an HMAC of user and password under a key drawn at start (the memo holds no
password and no hash an attacker could test guesses against). A remembered
credential is honoured only while the user's PLAIN secret or SCRAM
credential is the very one it was proven against: whatever changes or
deletes it (the admin plane, the metadata topic, SIGHUP), every entry of
that user is dropped at the next request.

When the pool already has ``[security] password_check_queue`` checks waiting,
a request that needs a hash is answered 503 with ``Retry-After`` and counted
(``kip714_requests_refused_total{reason="password_check_queue"}``).

An unknown user's attempt costs what a known user's does: it is hashed
against a dummy credential of the kind and iteration count most known users
have (a SCRAM mechanism and its iterations, or PLAIN's PBKDF2 and its), so
timing does not tell which user names exist.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from aiohttp import web

from telemetry.http.principal import AUTHENTICATED_USER, certificate_user
from telemetry.security import (
    ScramCredential,
    ScramMechanism,
    credential_from_salted_password,
    salted_password,
)
from telemetry.security.settings import DEFAULT_HASH_ITERATIONS, PasswordHash

if TYPE_CHECKING:
    from telemetry.enforcement.refusals import Refusals
    from telemetry.security.password_checks import PasswordChecks
    from telemetry.security.settings import SecuritySettings

_BASIC: Final = "basic "
_CHALLENGE: Final = {"WWW-Authenticate": 'Basic realm="kip714", charset="UTF-8"'}
#: How long a proven credential is remembered, and how many are.
MEMO_TTL_S: Final = 60.0
MEMO_MAX_ENTRIES: Final = 10_000
#: The refusal's reason label: the key of the bound.
QUEUE_REASON: Final = "password_check_queue"
_RETRY_AFTER_S: Final = "1"
_DISCARD_CHUNK: Final = 64 * 1024
#: The work name of a PLAIN secret's hash (SCRAM's are the mechanism names).
PLAIN_WORK: Final = "PLAIN-PBKDF2-SHA256"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: The metadata store's SCRAM credentials, keyed by (user, mechanism id): read on any thread.
ScramCredentials = Callable[[], Mapping[tuple[str, int], ScramCredential]]
#: What a user's password is checked against: a PLAIN secret or a SCRAM mechanism's credential.
Credential = PasswordHash | tuple[ScramMechanism, ScramCredential]


@dataclass(slots=True)
class BasicStats:
    """What HTTP Basic cost: hashes by (kind, iterations), and what the memo saved.

    ``work`` is counted on the password-check threads under a lock; the rest
    on the event loop.
    """

    #: Hashes computed, keyed by (``PLAIN-PBKDF2-SHA256`` or a SCRAM mechanism, iterations).
    work: dict[tuple[str, int], int] = field(default_factory=dict)
    memo_hits: int = 0
    #: Remembered credentials dropped because the user's credential changed or went.
    memo_invalidated: int = 0
    refused_queue_full: int = 0
    failures: int = 0


class _Memo:
    """Proven credentials by HMAC(user, password), oldest first; touched on the event loop only."""

    def __init__(self, ttl_s: float, max_entries: int, clock: Callable[[], float]) -> None:
        self._key = secrets.token_bytes(32)
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        #: digest → (user, the credential proven against, when it stops counting).
        self._entries: OrderedDict[bytes, tuple[str, Credential, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def digest(self, user: str, password: str) -> bytes:
        encoded_user = user.encode("utf-8")
        message = len(encoded_user).to_bytes(4, "big") + encoded_user + password.encode("utf-8")
        return hmac.digest(self._key, message, "sha256")

    def get(self, digest: bytes) -> tuple[str, Credential] | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        user, credential, expires = entry
        if self._clock() >= expires:
            del self._entries[digest]
            return None
        return user, credential

    def put(self, digest: bytes, user: str, credential: Credential) -> None:
        entries = self._entries
        entries.pop(digest, None)
        while len(entries) >= self._max_entries:
            entries.popitem(last=False)
        entries[digest] = (user, credential, self._clock() + self._ttl_s)

    def drop(self, digest: bytes) -> None:
        self._entries.pop(digest, None)

    def drop_stale(self, current: Callable[[str], Credential | None]) -> int:
        """Drop every entry whose user's credential is no longer the one it was proven against."""
        stale = [
            digest
            for digest, (user, credential, _) in self._entries.items()
            if current(user) != credential
        ]
        for digest in stale:
            del self._entries[digest]
        return len(stale)

    def clear(self) -> None:
        self._entries.clear()


class HttpAuthenticator:
    """Sets each ingestion request's principal (or answers 401) before its route runs.

    A guard on each ingestion route rather than an aiohttp middleware: with
    no middleware in the app, aiohttp runs no middleware chain (two more
    coroutines and a wrapper on every request, ``/v1/metrics`` included).
    """

    def __init__(
        self,
        settings: SecuritySettings,
        scram_credentials: ScramCredentials,
        checks: PasswordChecks,
        *,
        refusals: Refusals | None = None,
        max_body_bytes: int = 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.scram_credentials = scram_credentials
        self.checks = checks
        self.refusals = refusals
        #: The most of a refused request's body read (and dropped) before its connection closes.
        self.max_body_bytes = max_body_bytes
        self.stats = BasicStats()
        self.required = settings.configured and not settings.allow_anonymous
        self._memo = _Memo(MEMO_TTL_S, MEMO_MAX_ENTRIES, clock)
        self._work_lock = threading.Lock()
        #: The credential sources the memo was last checked against (identity: they are immutable).
        self._seen_plain: object = settings.plain_users
        self._seen_scram: object = scram_credentials()
        #: (plain users, SCRAM credentials, the dummy made for them) for unknown users.
        self._dummy: tuple[object, object, Credential] | None = None

    @property
    def failures(self) -> int:
        return self.stats.failures

    @property
    def memo_entries(self) -> int:
        return len(self._memo)

    def work(self) -> dict[tuple[str, int], int]:
        """A copy of :attr:`BasicStats.work` (counted on the password-check threads)."""
        with self._work_lock:
            return dict(self.stats.work)

    def forget_all(self) -> None:
        """Forget every remembered credential (SIGHUP: the next request of each client hashes)."""
        self._memo.clear()

    def guard(self, handler: Handler, door: str = "http") -> Handler:
        """``handler``, served only to a request this authenticator lets through.

        ``door`` labels the refusals counted for the route (``otlp`` or ``http``).
        """
        return _Guarded(self, handler, door).handle

    def anonymous_refusal(self, request: web.Request) -> web.Response | None:
        """For a request without Basic credentials: its 401, or ``None`` to serve it."""
        if self.required and certificate_user(request) is None:
            return _unauthorized(
                "[security] allow_anonymous = false: send a client certificate or "
                "Authorization: Basic"
            )
        return None

    async def basic_refusal(
        self, request: web.Request, header: str, door: str = "http"
    ) -> web.StreamResponse | None:
        """For ``Authorization: <header>`` (Basic): its refusal, or ``None`` with the user set.

        A client certificate, when there is one, names the sender instead.
        A 401 closes the connection once the rest of the body is read.
        """
        if certificate_user(request) is not None:
            return None
        credentials = _decode_basic(header[len(_BASIC) :].strip())
        user: str | None = None
        if credentials is not None:
            name, password = credentials
            self._drop_stale()
            digest = self._memo.digest(name, password)
            remembered = self._memo.get(digest)
            if remembered is not None and self._current(name) == remembered[1]:
                self.stats.memo_hits += 1
                request[AUTHENTICATED_USER] = name
                return None
            if remembered is not None:  # proven against a credential since changed
                self._memo.drop(digest)
                self.stats.memo_invalidated += 1
            if self.checks.full:
                return self._queue_full(door)
            proven = await self.checks.run(self._verify, name, password)
            if proven is not None:
                self._memo.put(digest, name, proven)
                user = name
        if user is None:
            self.stats.failures += 1
            await asyncio.sleep(self.settings.failed_authentication_delay_ms / 1000)
            await self.discard_body(request)
            response = _unauthorized("the Basic credentials do not check")
            response.force_close()
            return response
        request[AUTHENTICATED_USER] = user
        return None

    def _queue_full(self, door: str) -> web.Response:
        self.stats.refused_queue_full += 1
        if self.refusals is not None:
            self.refusals.count(door, QUEUE_REASON)
        return web.Response(
            status=503,
            text="503 service unavailable: too many password checks waiting "
            "([security] password_check_queue); retry later",
            headers={"Retry-After": _RETRY_AFTER_S},
        )

    async def discard_body(self, request: web.Request) -> None:
        """Read what is left of the body (at most ``max_body_bytes``), so closing sends no reset."""
        length = request.content_length
        if length is not None and length > self.max_body_bytes:
            return  # over the routes' bound: not worth reading, the client gets a close
        content = request.content
        left = self.max_body_bytes
        while left > 0:
            chunk = await content.read(min(_DISCARD_CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)

    def _drop_stale(self) -> None:
        """After any change of the PLAIN users or SCRAM credentials, drop what it invalidated."""
        plain = self.settings.plain_users
        scram = self.scram_credentials()
        if plain is self._seen_plain and scram is self._seen_scram:
            return
        self._seen_plain, self._seen_scram = plain, scram
        self.stats.memo_invalidated += self._memo.drop_stale(self._current)

    def _current(self, user: str) -> Credential | None:
        """What ``user``'s password is checked against: PLAIN first, then SCRAM-SHA-256, -512."""
        secret = self.settings.plain_users.get(user)
        if secret is not None:
            return secret
        credentials = self.scram_credentials()
        for mechanism in ScramMechanism:
            credential = credentials.get((user, mechanism.mechanism_id))
            if credential is not None:
                return (mechanism, credential)
        return None

    def _verify(self, user: str, password: str) -> Credential | None:
        """On the pool: one hash; the credential ``password`` proved, or ``None``."""
        credential = self._current(user)
        if credential is None:  # an unknown user costs what a known one does
            self._matches(self._unknown_user_credential(), password)
            return None
        return credential if self._matches(credential, password) else None

    def _matches(self, credential: Credential, password: str) -> bool:
        if isinstance(credential, PasswordHash):
            self._count_work(PLAIN_WORK, credential.iterations)
            return credential.matches(password)
        mechanism, scram = credential
        self._count_work(mechanism.mechanism_name, scram.iterations)
        salted = salted_password(mechanism, password, scram.salt, scram.iterations)
        derived = credential_from_salted_password(mechanism, scram.salt, salted, scram.iterations)
        return hmac.compare_digest(derived.stored_key, scram.stored_key)

    def _count_work(self, kind: str, iterations: int) -> None:
        key = (kind, iterations)
        with self._work_lock:
            work = self.stats.work
            work[key] = work.get(key, 0) + 1

    def _unknown_user_credential(self) -> Credential:
        """A credential no password matches, of the kind and cost most known users have."""
        plain = self.settings.plain_users
        scram = self.scram_credentials()
        cached = self._dummy
        if cached is not None and cached[0] is plain and cached[1] is scram:
            return cached[2]
        dummy = _dummy_for(plain, scram)
        self._dummy = (plain, scram, dummy)
        return dummy


def _dummy_for(
    plain: Mapping[str, PasswordHash], scram: Mapping[tuple[str, int], ScramCredential]
) -> Credential:
    """The most common (kind, iterations) among the credentials checked, as a dummy."""
    order = {mechanism.mechanism_id: rank for rank, mechanism in enumerate(ScramMechanism)}
    checked: dict[str, tuple[int, ScramMechanism, int]] = {}  # user → (rank, mechanism, iters)
    for (user, mechanism_id), credential in scram.items():
        mechanism = ScramMechanism.by_id(mechanism_id)
        if mechanism is None or user in plain:
            continue
        rank = order[mechanism_id]
        if user not in checked or rank < checked[user][0]:
            checked[user] = (rank, mechanism, credential.iterations)
    counts: dict[tuple[str, int], int] = {}
    for secret in plain.values():
        key = (PLAIN_WORK, secret.iterations)
        counts[key] = counts.get(key, 0) + 1
    for _, mechanism, iterations in checked.values():
        key = (mechanism.mechanism_name, iterations)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return PasswordHash(DEFAULT_HASH_ITERATIONS, secrets.token_bytes(16), _random_digest())
    kind, iterations = max(counts, key=lambda key: (counts[key], key[1]))
    if kind == PLAIN_WORK:
        return PasswordHash(iterations, secrets.token_bytes(16), _random_digest())
    mechanism = ScramMechanism.by_name(kind)
    assert mechanism is not None
    return (
        mechanism,
        ScramCredential(
            salt=secrets.token_bytes(32),
            stored_key=_random_digest(),
            server_key=_random_digest(),
            iterations=iterations,
        ),
    )


def _random_digest() -> bytes:
    return hashlib.sha256(secrets.token_bytes(32)).digest()


def _decode_basic(token: str) -> tuple[str, str] | None:
    """``user:password`` from a Basic token, or ``None`` when it is not one."""
    try:
        decoded = base64.b64decode(token, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    if not colon or not user:
        return None
    return user, password


class _Guarded:
    """One route behind the authenticator; ``handle`` is what aiohttp calls."""

    def __init__(self, authenticator: HttpAuthenticator, handler: Handler, door: str) -> None:
        self._authenticator = authenticator
        self._handler = handler
        self._door = door

    async def handle(self, request: web.Request) -> web.StreamResponse:
        authenticator = self._authenticator
        header = request.headers.get("Authorization", "")
        refusal: web.StreamResponse | None
        if header[: len(_BASIC)].lower() == _BASIC:
            refusal = await authenticator.basic_refusal(request, header, self._door)
        else:  # no coroutine for the usual request, which has no credentials to check
            refusal = authenticator.anonymous_refusal(request)
            if refusal is not None:  # closed like a failed Basic check
                await authenticator.discard_body(request)
                refusal.force_close()
        if refusal is not None:
            return refusal
        return await self._handler(request)


def _unauthorized(message: str) -> web.Response:
    return web.Response(status=401, text=f"401 unauthorized: {message}", headers=_CHALLENGE)
