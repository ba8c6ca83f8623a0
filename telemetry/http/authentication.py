"""Who sends an HTTP ingestion request: a client certificate, or ``Authorization: Basic``.

The principal, not the door, decides the quota entity. On the Kafka listener
a client proves who it is with SASL or a certificate; on the HTTP ingestion
routes (``/v1/metrics``, ``/v1/telemetry/subscriptions``, ``/v1/telemetry/push``)
with a certificate (``[http.tls] cafile``) or ``Authorization: Basic``,
checked against the same PLAIN users (``[security.plain_users]``) and SCRAM
credentials (the metadata store) SASL uses. OTel SDKs send the header through
``OTEL_EXPORTER_OTLP_HEADERS="Authorization=Basic <base64 user:password>"``.

* A request with Basic credentials is served as that user if they check,
  else answered 401 after ``failed_authentication_delay_ms``;
* with ``[security]`` and ``allow_anonymous = false`` a request with neither
  a certificate nor Basic credentials is answered 401, charged to nobody (no
  quota is touched: the sender is not known);
* otherwise it is ``User:ANONYMOUS`` (or the certificate's subject).

Each check is one password hash on the password-check pool (never the event
loop), an unknown user hashed against a dummy credential like a known one.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from aiohttp import web

from telemetry.http.principal import AUTHENTICATED_USER, certificate_user
from telemetry.security import ScramMechanism, credential_from_salted_password, salted_password
from telemetry.security.password_checks import dummy_hash

if TYPE_CHECKING:
    from telemetry.security import ScramCredential
    from telemetry.security.password_checks import PasswordChecks
    from telemetry.security.settings import SecuritySettings

_BASIC: Final = "basic "
_CHALLENGE: Final = {"WWW-Authenticate": 'Basic realm="kip714", charset="UTF-8"'}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ScramLookup = Callable[[ScramMechanism, str], "ScramCredential | None"]


class HttpAuthenticator:
    """Sets each ingestion request's principal (or answers 401) before its route runs.

    A guard on each ingestion route rather than an aiohttp middleware: with
    no middleware in the app, aiohttp runs no middleware chain (two more
    coroutines and a wrapper on every request, ``/v1/metrics`` included).
    """

    def __init__(
        self, settings: SecuritySettings, scram: ScramLookup, checks: PasswordChecks
    ) -> None:
        self.settings = settings
        self.scram = scram
        self.checks = checks
        self.failures = 0
        self.required = settings.configured and not settings.allow_anonymous
        self._dummy = dummy_hash(settings.plain_users)

    def guard(self, handler: Handler) -> Handler:
        """``handler``, served only to a request this authenticator lets through."""
        return _Guarded(self, handler).handle

    def anonymous_refusal(self, request: web.Request) -> web.Response | None:
        """For a request without Basic credentials: its 401, or ``None`` to serve it."""
        if self.required and certificate_user(request) is None:
            return _unauthorized(
                "[security] allow_anonymous = false: send a client certificate or "
                "Authorization: Basic"
            )
        return None

    async def basic_refusal(self, request: web.Request, header: str) -> web.Response | None:
        """For ``Authorization: <header>`` (Basic): its 401, or ``None`` with the user set.

        A client certificate, when there is one, names the sender instead.
        """
        if certificate_user(request) is not None:
            return None
        user = await self._check_basic(header[len(_BASIC) :].strip())
        if user is None:
            self.failures += 1
            await asyncio.sleep(self.settings.failed_authentication_delay_ms / 1000)
            return _unauthorized("the Basic credentials do not check")
        request[AUTHENTICATED_USER] = user
        return None

    async def _check_basic(self, token: str) -> str | None:
        try:
            decoded = base64.b64decode(token, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, colon, password = decoded.partition(":")
        if not colon or not user:
            return None
        checked = await self.checks.run(self._verify, user, password)
        return user if checked else None

    def _verify(self, user: str, password: str) -> bool:
        """On the pool: one hash, against the user's PLAIN secret, SCRAM credential or a dummy."""
        secret = self.settings.plain_users.get(user)
        if secret is not None:
            return secret.matches(password)
        for mechanism in ScramMechanism:
            credential = self.scram(mechanism, user)
            if credential is not None:
                salted = salted_password(
                    mechanism, password, credential.salt, credential.iterations
                )
                derived = credential_from_salted_password(
                    mechanism, credential.salt, salted, credential.iterations
                )
                return hmac.compare_digest(derived.stored_key, credential.stored_key)
        self._dummy.matches(password)  # an unknown user costs what a known one does
        return False


class _Guarded:
    """One route behind the authenticator; ``handle`` is what aiohttp calls."""

    def __init__(self, authenticator: HttpAuthenticator, handler: Handler) -> None:
        self._authenticator = authenticator
        self._handler = handler

    async def handle(self, request: web.Request) -> web.StreamResponse:
        authenticator = self._authenticator
        header = request.headers.get("Authorization", "")
        if header[: len(_BASIC)].lower() == _BASIC:
            refusal = await authenticator.basic_refusal(request, header)
        else:  # no coroutine for the usual request, which has no credentials to check
            refusal = authenticator.anonymous_refusal(request)
        if refusal is not None:
            return refusal
        return await self._handler(request)


def _unauthorized(message: str) -> web.Response:
    return web.Response(status=401, text=f"401 unauthorized: {message}", headers=_CHALLENGE)
