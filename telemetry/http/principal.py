"""The principal of an HTTP request: the verified client certificate's subject, else anonymous.

The HTTP listener builds principals as the Kafka listener does for a TLS
connection (Kafka's ``DefaultKafkaPrincipalBuilder``): with ``[http.tls]
cafile`` the server requires a client certificate signed by that CA, and its
subject in RFC 2253 order is the principal's name (``CN=alice,O=example``).
That name is the quota ``user`` entity; ``User:<name>`` is what lands in the
``principal`` column. Without a certificate, a user that ``Authorization:
Basic`` proved (telemetry.http.authentication) on the ingestion routes; else
``User:ANONYMOUS``.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from telemetry.enforcement import ANONYMOUS_USER
from telemetry.security.tls import certificate_principal_name

#: Where :mod:`telemetry.http.authentication` puts a user that ``Authorization: Basic`` proved.
AUTHENTICATED_USER: Final = web.RequestKey("kip714.authenticated_user", str)


def certificate_user(request: web.Request) -> str | None:
    """The verified client certificate's subject, if the request came with one."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    return certificate_principal_name(ssl_object)


def request_user(request: web.Request) -> str:
    """The quota entity's user: the certificate subject, the Basic user, else ``ANONYMOUS``."""
    user = certificate_user(request)
    if user is not None:
        return user
    # len() first: Mapping.get on a request without the key raises and catches a KeyError.
    return (request.get(AUTHENTICATED_USER) if len(request) else None) or ANONYMOUS_USER


def principal(user: str) -> str:
    """``User:<user>``, as the landing's ``principal`` column and the instance context name it."""
    return f"User:{user}"
