"""mTLS on the HTTP listener: the client certificate's subject is the principal of its pushes.

A real server with ``[http.tls] cafile``, driven over HTTPS by aiohttp with a
client certificate issued by that CA. The subject (``CN=alice,O=kip714``) is
the quota ``user`` entity of OTLP and KIP-714 requests alike, and
``User:CN=alice,O=kip714`` lands in the ``principal`` column, as for a Kafka
client with the same certificate.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

import aiohttp

from telemetry.errors import ErrorCode
from tests.exporters.lake_support import table_rows
from tests.telemetry.http.test_http_otlp import PROTOBUF, ROUTE, SDK_BODY
from tests.telemetry.kafka_wire_client import otlp_payload
from tests.telemetry.security.tls_support import make_certificates
from tests.telemetry.server_support import running, until

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server

ALICE = "CN=alice,O=kip714"
CONFIG = """
[subscriptions.all]
metrics = ["*"]
"interval.ms" = 100
[exporters.landing]
type = "iceberg"
[exporters.landing.options]
path = "{landing}"
max_file_age_s = 0.2
[http.tls]
certfile = "{cert}"
keyfile = "{key}"
cafile = "{ca}"
# Only alice's OTLP service "checkout": one byte a second mutes it for hours.
[[quotas.clients]]
user = "{alice}"
client_id = "checkout"
push_byte_rate = 1
"""


def landed(landing: Path) -> set[tuple[str, str]]:
    """(client_id, principal) of every committed metrics row."""
    return {
        (r["client_id"], r["principal"]) for r in table_rows(landing, ["client_id", "principal"])
    }


async def kip714_push(session: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    """GetTelemetrySubscriptions then one PushTelemetry over HTTP, as client id ``kip-app``."""
    async with session.post(
        f"{url}/v1/telemetry/subscriptions", json={"client_id": "kip-app"}
    ) as response:
        subscription: dict[str, Any] = await response.json()
    headers = {
        "Kip714-Client-Instance-Id": subscription["client_instance_id"],
        "Kip714-Subscription-Id": str(subscription["subscription_id"]),
        "Kip714-Client-Id": "kip-app",
        "Content-Type": "application/x-protobuf",
    }
    payload = otlp_payload("org.apache.kafka.producer.bytes")
    async with session.post(f"{url}/v1/telemetry/push", data=payload, headers=headers) as response:
        pushed: dict[str, Any] = await response.json()
    return [subscription, pushed]


async def test_the_client_certificate_is_the_principal_of_http_pushes(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    landing = tmp_path / "landing"
    config = CONFIG.format(
        landing=landing, cert=certs.server_cert, key=certs.server_key, ca=certs.ca, alice=ALICE
    )
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(certs.client_cert, certs.client_key)
    server: Server
    async with running(tmp_path, config) as server:
        assert server.http_address is not None
        url = "https://{}:{}".format(*server.http_address)
        connector = aiohttp.TCPConnector(ssl=context)
        async with aiohttp.ClientSession(connector=connector) as session:
            answers = await kip714_push(session, url)
            statuses = []
            for _ in range(2):
                async with session.post(url + ROUTE, data=SDK_BODY, headers=PROTOBUF) as response:
                    statuses.append(response.status)

        async def both_landed() -> bool:
            return len(landed(landing)) == 2

        await until(both_landed)

    assert [answer["error_code"] for answer in answers] == [ErrorCode.NONE, ErrorCode.NONE], answers
    # The quota of (alice, checkout) applies: the first request earns a throttle, the next is
    # 429. As User:ANONYMOUS the request would match no quota and both would be 200.
    assert statuses == [200, 429]
    assert landed(landing) == {("kip-app", f"User:{ALICE}"), ("checkout", f"User:{ALICE}")}
