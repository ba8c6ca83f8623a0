"""The principal of an HTTP request: the verified client certificate's subject, else anonymous.

The HTTP listener builds principals as the Kafka listener does for a TLS
connection (Kafka's ``DefaultKafkaPrincipalBuilder``): with ``[http.tls]
cafile`` the server requires a client certificate signed by that CA, and its
subject in RFC 2253 order is the principal's name (``CN=alice,O=example``).
That name is the quota ``user`` entity; ``User:<name>`` is what lands in the
``principal`` column. A request without a certificate (plain HTTP, or TLS
without ``cafile``) is ``User:ANONYMOUS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from telemetry.enforcement import ANONYMOUS_USER
from telemetry.security.tls import certificate_principal_name

if TYPE_CHECKING:
    from aiohttp import web


def request_user(request: web.Request) -> str:
    """The quota entity's user of ``request``: the certificate subject, else ``ANONYMOUS``."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    return certificate_principal_name(ssl_object) or ANONYMOUS_USER


def principal(user: str) -> str:
    """``User:<user>``, as the landing's ``principal`` column and the instance context name it."""
    return f"User:{user}"
