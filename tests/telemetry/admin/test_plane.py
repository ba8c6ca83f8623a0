"""The admin plane alone: quota merging; a change applied although its request was cancelled."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

from telemetry.admin.plane import AdminPlane, merge_quotas
from telemetry.enforcement import (
    ClientQuotaSettings,
    Enforcement,
    IpQuotaSettings,
    LimitSettings,
    QuotaSettings,
)
from telemetry.metastore import MetadataStore
from telemetry.subscriptions import SubscriptionRegistry
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
