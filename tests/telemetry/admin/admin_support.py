"""Admin clients for tests: kafka-python's KafkaAdminClient, admin frames over a WireClient."""

from __future__ import annotations

import importlib
import itertools
import warnings
from typing import TYPE_CHECKING, Any

from telemetry.wire import RequestHeader
from telemetry.wire.admin_apis import (
    decode_admin_request,
    decode_admin_response,
    encode_admin_request,
)

if TYPE_CHECKING:
    from telemetry.wire.admin_apis import AdminRequest, AdminResponse
    from tests.telemetry.kafka_wire_client import WireClient

with warnings.catch_warnings():
    # kafka-python 3.0.12 loads its schemas with importlib.resources APIs deprecated in 3.11.
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    kafka_admin_module: Any = importlib.import_module("kafka.admin")

KafkaAdminClient: Any = kafka_admin_module.KafkaAdminClient
ConfigResource: Any = kafka_admin_module.ConfigResource
ConfigResourceType: Any = kafka_admin_module.ConfigResourceType
CLIENT_METRICS: Any = ConfigResourceType.CLIENT_METRICS
_CORRELATION_IDS = itertools.count(10_000)


def admin_client(host: str, port: int, client_id: str = "kip714-admin-test") -> Any:
    """A kafka-python admin client (blocking: call it from a thread)."""
    return KafkaAdminClient(
        bootstrap_servers=f"{host}:{port}", client_id=client_id, request_timeout_ms=10_000
    )


def subscription(name: str, configs: dict[str, Any] | None = None) -> Any:
    return ConfigResource(CLIENT_METRICS, name, configs)


async def admin_call(
    client: WireClient, api_key: int, version: int, request: AdminRequest
) -> AdminResponse:
    """One admin request and its decoded response over the repo's wire client."""
    correlation_id = next(_CORRELATION_IDS)
    header = RequestHeader(
        api_key=api_key, api_version=version, correlation_id=correlation_id,
        client_id=client.client_id,
    )  # fmt: skip
    frame = encode_admin_request(header, request)
    assert decode_admin_request(frame[4:])[1] == request
    await client.write(frame)
    answered, response = decode_admin_response(await client.read_frame(), api_key, version)
    assert answered == correlation_id
    return response
