"""Admin requests naming more than 1,000 items are refused at the count, by closing."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import pytest

from telemetry.wire.admin_apis import AdminApiKey, decode_admin_response, encode_admin_request
from telemetry.wire.config_messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
)
from telemetry.wire.headers import RequestHeader
from telemetry.wire.primitives import MAX_ADMIN_ITEMS
from telemetry.wire.quota_messages import (
    AlterClientQuotasEntry,
    AlterClientQuotasRequest,
    ComponentData,
    DescribeClientQuotasRequest,
    EntityData,
    QuotaOp,
)
from telemetry.wire.scram_messages import AlterUserScramCredentialsRequest, ScramCredentialDeletion
from tests.telemetry.kafka_wire_client import WireClient
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from telemetry.server.bootstrap import Server
    from telemetry.wire.admin_apis import AdminRequest

TOO_MANY = MAX_ADMIN_ITEMS + 1


def _describe(count: int, keys: tuple[str, ...] | None = None) -> DescribeConfigsRequest:
    return DescribeConfigsRequest(
        resources=tuple(
            DescribeConfigsResource(
                resource_type=16, resource_name=f"s{i}", configuration_keys=keys
            )
            for i in range(count)
        )
    )


async def _send(server: Server, api_key: int, version: int, request: AdminRequest) -> WireClient:
    assert server.listener is not None
    client = await WireClient.connect(*server.listener.bound_address, "t")
    header = RequestHeader(api_key=api_key, api_version=version, correlation_id=1, client_id="t")
    await client.write(encode_admin_request(header, request))
    return client


async def test_a_300000_resource_describe_configs_is_refused_at_its_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(tmp_path, "") as server:
        assert server.listener is not None
        with caplog.at_level(logging.WARNING, "telemetry.kafka.connection"):
            client = await _send(server, AdminApiKey.DESCRIBE_CONFIGS, 4, _describe(300_000))
            try:
                closed = await client.closed_by_server()
            finally:
                await client.close()
        malformed = server.listener.stats.closed_for["malformed"]
        # The largest request still allowed is answered in full.
        client = await _send(server, AdminApiKey.DESCRIBE_CONFIGS, 4, _describe(MAX_ADMIN_ITEMS))
        try:
            _, answer = decode_admin_response(
                await client.read_frame(), AdminApiKey.DESCRIBE_CONFIGS, 4
            )
        finally:
            await client.close()
    assert closed
    assert malformed == 1
    assert "an array of 300000 elements" in caplog.text
    assert f"more than {MAX_ADMIN_ITEMS}" in caplog.text
    assert isinstance(answer, DescribeConfigsResponse)
    assert len(answer.results) == MAX_ADMIN_ITEMS


@pytest.mark.parametrize(
    ("api_key", "version", "request_"),
    [
        (AdminApiKey.DESCRIBE_CONFIGS, 4, _describe(1, tuple(f"k{i}" for i in range(TOO_MANY)))),
        (
            AdminApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            IncrementalAlterConfigsRequest(
                resources=tuple(
                    AlterConfigsResource(
                        resource_type=16,
                        resource_name=f"s{i}",
                        configs=(
                            AlterableConfig(
                                name="metrics", config_operation=AlterConfigOp.SET, value="*"
                            ),
                        ),
                    )
                    for i in range(TOO_MANY)
                )
            ),
        ),
        (
            AdminApiKey.DESCRIBE_CLIENT_QUOTAS,
            1,
            DescribeClientQuotasRequest(
                components=tuple(
                    ComponentData(entity_type="user", match_type=0, match=f"u{i}")
                    for i in range(TOO_MANY)
                )
            ),
        ),
        (
            AdminApiKey.ALTER_CLIENT_QUOTAS,
            1,
            AlterClientQuotasRequest(
                entries=tuple(
                    AlterClientQuotasEntry(
                        entity=(EntityData(entity_type="user", entity_name=f"u{i}"),),
                        ops=(QuotaOp(key="request_percentage", value=1.0),),
                    )
                    for i in range(TOO_MANY)
                )
            ),
        ),
        (
            AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            0,
            AlterUserScramCredentialsRequest(
                deletions=tuple(
                    ScramCredentialDeletion(name=f"u{i}", mechanism=1) for i in range(TOO_MANY)
                )
            ),
        ),
    ],
    ids=["describe-keys", "alter-configs", "describe-quotas", "alter-quotas", "scram"],
)
async def test_every_admin_request_is_bounded(
    tmp_path: Path, api_key: int, version: int, request_: AdminRequest
) -> None:
    async with running(tmp_path, "") as server:
        client = await _send(server, api_key, version, request_)
        try:
            closed = await client.closed_by_server()
        finally:
            await client.close()
        assert server.admin is not None
        stored = server.admin.store.next_offset
        assert server.listener is not None
        malformed = server.listener.stats.closed_for["malformed"]
    assert closed
    assert malformed == 1
    assert stored == 0


async def test_a_long_describe_configs_answer_yields_to_other_connections(tmp_path: Path) -> None:
    async with running(tmp_path, "") as server:
        assert server.listener is not None
        long_answer = await _send(
            server, AdminApiKey.DESCRIBE_CONFIGS, 4, _describe(MAX_ADMIN_ITEMS)
        )
        other = await WireClient.connect(*server.listener.bound_address, "t")
        order: list[str] = []

        async def answered(name: str, client: WireClient) -> None:
            await client.read_frame()
            order.append(name)

        try:
            reading = asyncio.ensure_future(answered("long", long_answer))
            await other.api_versions()  # sent while the long answer is being built
            order.append("other")
            await reading
        finally:
            await long_answer.close()
            await other.close()
    assert order == ["other", "long"]
