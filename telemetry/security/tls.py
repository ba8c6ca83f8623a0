"""TLS for both listeners: the server context, and the principal of a client certificate.

Kafka speaks TLS from the first byte (no STARTTLS, no ALPN). With a
``cafile`` the server requires a client certificate signed by it (Kafka's
``ssl.client.auth=required``), and the certificate's subject becomes the
principal the way Kafka's ``DefaultKafkaPrincipalBuilder`` writes it:
``User:`` plus the distinguished name in RFC 2253 order, most specific first
(``User:CN=alice,O=example``), as Java's ``X500Principal.getName()`` prints it.
"""

from __future__ import annotations

import functools
import ssl
from typing import TYPE_CHECKING

from cryptography import x509

if TYPE_CHECKING:
    from telemetry.security.settings import TlsSettings


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A TLS 1.2+ server context from the certificate, key and optional client CA.

    Raises:
        ssl.SSLError, OSError: a file does not load or the key does not fit.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.certfile, settings.keyfile)
    if settings.cafile is not None:
        context.load_verify_locations(cafile=settings.cafile)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def certificate_principal_name(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The subject DN of the verified peer certificate (``CN=alice,O=example``), or None."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return _subject_name(der)


@functools.lru_cache(maxsize=1024)
def _subject_name(der: bytes) -> str:
    """The subject of a DER certificate, memoised by its bytes.

    The HTTP listener asks on every request of an mTLS connection, and
    parsing a certificate costs about 10 µs.
    """
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
