"""The admin plane alone: quota merging; a change applied although its request was cancelled."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from typing import TYPE_CHECKING

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from telemetry.admin.authorizer import Authorizer
from telemetry.admin.http_routes import add_admin_routes
from telemetry.admin.plane import AdminPlane, merge_quotas
from telemetry.admin.settings import AdminSettings
from telemetry.core.subscriptions import SubscriptionRegistry
from telemetry.enforcement import (
    ClientQuotas,
    ClientQuotaSettings,
    Enforcement,
    IpQuotaSettings,
    LimitSettings,
    QuotaSettings,
)
from telemetry.errors import ErrorCode
from telemetry.metastore import MetadataStore
from telemetry.wire.config_messages import AlterableConfig, AlterConfigsResource

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from telemetry.metastore import MetadataImage, MetadataRecord


class GatedStore(MetadataStore):
    """The real store, whose appends wait for the test to open the gate."""

    entered = threading.Event()
    gate = threading.Event()

    def append(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        self.entered.set()
        assert self.gate.wait(30)
        return super().append(records)


def test_dynamic_quota_keys_override_the_file_entity_by_entity() -> None:
    static = QuotaSettings(
        clients=(ClientQuotaSettings(user="alice", push_byte_rate=100.0, request_percentage=5.0),),
        ips=(IpQuotaSettings(ip="10.0.0.1", connection_creation_rate=3),),
    )
    merged = merge_quotas(
        static,
        {
            (("user", "alice"),): {"push_byte_rate": 200.0},
            (("client-id", None), ("user", "bob")): {"controller_mutation_rate": 1.0},
            (("ip", None),): {"connection_creation_rate": 7.0},
        },
    )
    assert merged.clients == (
        ClientQuotaSettings(user="alice", push_byte_rate=200.0, request_percentage=5.0),
        ClientQuotaSettings(user="bob", client_id="<default>", controller_mutation_rate=1.0),
    )
    assert merged.ips == (
        IpQuotaSettings(ip="10.0.0.1", connection_creation_rate=3),
        IpQuotaSettings(ip="<default>", connection_creation_rate=7),
    )


async def test_a_change_cancelled_while_it_is_written_is_still_applied(tmp_path: Path) -> None:
    GatedStore.entered.clear()
    GatedStore.gate.clear()
    registry = SubscriptionRegistry()
    with GatedStore.open(tmp_path) as store:
        plane = AdminPlane(
            store,
            registry,
            Enforcement(),
            static_subscriptions=(),
            static_quotas=QuotaSettings(),
            limits=LimitSettings(),
        )
        resource = AlterConfigsResource(
            resource_type=16,
            resource_name="late",
            configs=(AlterableConfig(name="metrics", config_operation=0, value="*"),),
        )
        change = asyncio.create_task(plane.alter_client_metrics((resource,), False))
        assert await asyncio.to_thread(GatedStore.entered.wait, 30)
        change.cancel()  # the server stops while the append is in its thread
        await asyncio.gather(change, return_exceptions=True)
        assert change.cancelled()
        GatedStore.gate.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while registry.get("late") is None and loop.time() < deadline:
            await asyncio.sleep(0.01)
        # The store has the change, so the server runs by it.
        assert "late" in store.image.client_metrics
        assert registry.get("late") is not None


def _plane(store: MetadataStore, registry: SubscriptionRegistry) -> AdminPlane:
    return AdminPlane(
        store,
        registry,
        Enforcement(),
        static_subscriptions=(),
        static_quotas=QuotaSettings(),
        limits=LimitSettings(),
    )


async def test_a_store_that_cannot_write_answers_minus_1_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    registry = SubscriptionRegistry()
    with MetadataStore.open(tmp_path) as store:
        plane = _plane(store, registry)
        monkeypatch.setattr(os, "fsync", failing_fsync)
        resources = (
            AlterConfigsResource(
                resource_type=16,
                resource_name="lost",
                configs=(AlterableConfig(name="metrics", config_operation=0, value="*"),),
            ),
            AlterConfigsResource(
                resource_type=16,
                resource_name="bad",
                configs=(AlterableConfig(name="nope", config_operation=0, value="1"),),
            ),
        )
        answers = await plane.alter_client_metrics(resources, False)
        image = store.image
    assert [(a.resource_name, a.error_code) for a in answers] == [
        ("lost", ErrorCode.UNKNOWN_SERVER_ERROR),
        ("bad", ErrorCode.INVALID_REQUEST),
    ]
    assert "Input/output error" in (answers[0].error_message or "")
    assert registry.get("lost") is None
    assert not image.client_metrics
    assert "the metadata store refused a change" in caplog.text


async def test_without_a_token_the_http_admin_api_is_off_off_loopback(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        app = web.Application()
        add_admin_routes(
            app,
            _plane(store, SubscriptionRegistry()),
            authorizer=Authorizer.from_settings(AdminSettings(), http_host="192.0.2.1"),
            quotas=ClientQuotas(QuotaSettings()),
            clock=lambda: 0,
        )
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            response = await client.post("/admin/subscriptions/x", json={"set": {"metrics": "*"}})
            status, body = response.status, await response.json()
        stored = dict(store.image.client_metrics)
    assert status == 403
    assert "[admin] token" in body["error"]
    assert stored == {}
