"""The principal of a client certificate, read after a real TLS handshake (memory BIOs)."""

from __future__ import annotations

import contextlib
import ssl
from typing import TYPE_CHECKING

from cryptography import x509

from telemetry.security import tls
from telemetry.security.settings import TlsSettings
from tests.telemetry.security.tls_support import make_certificates

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _server_side_of_a_handshake(directory: Path) -> ssl.SSLObject:
    """The server's end of an mTLS handshake with make_certificates' client (alice)."""
    certificates = make_certificates(directory)
    server_context = tls.server_context(
        TlsSettings(
            certfile=certificates.server_cert,
            keyfile=certificates.server_key,
            cafile=certificates.ca,
        )
    )
    client_context = ssl.create_default_context(cafile=str(certificates.ca))
    client_context.load_cert_chain(str(certificates.client_cert), str(certificates.client_key))
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    client = client_context.wrap_bio(client_in, client_out, server_hostname="localhost")
    done = {"server": False, "client": False}
    for _ in range(20):  # a TLS 1.3 handshake takes three or four exchanges
        for name, end in (("client", client), ("server", server)):
            if not done[name]:
                with contextlib.suppress(ssl.SSLWantReadError):
                    end.do_handshake()
                    done[name] = True
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done.values()):
            return server
    raise AssertionError("the handshake did not finish")


def test_the_subject_is_the_principal_and_each_certificate_is_parsed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = _server_side_of_a_handshake(tmp_path / "alice")
    other = _server_side_of_a_handshake(tmp_path / "other")  # another CA, another key
    parsed: list[bytes] = []
    load = x509.load_der_x509_certificate

    def counting_load(der: bytes) -> x509.Certificate:
        parsed.append(der)
        return load(der)

    monkeypatch.setattr(x509, "load_der_x509_certificate", counting_load)
    # The HTTP listener asks on every request of a connection.
    names = [tls.certificate_principal_name(alice) for _ in range(3)]
    names.append(tls.certificate_principal_name(other))
    assert names == ["CN=alice,O=kip714"] * 4
    assert len(parsed) == 2  # once per certificate, not per request
    assert parsed[0] != parsed[1]
    assert tls.certificate_principal_name(None) is None
