"""A subscription altered through the Kafka admin API reaches a real librdkafka producer."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tests.telemetry.admin.admin_support import admin_client, subscription
from tests.telemetry.kafka_real_clients import RealClient, client_config
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

    from exporters.api import LoggedPush
    from telemetry.server.bootstrap import Server

CONFIG = (
    '[subscriptions.telemetry]\nmetrics = ["org.apache.kafka.producer."]\n"interval.ms" = 1000\n'
)


async def producer_pushes(server: Server, client_id: str) -> list[LoggedPush]:
    log = server.log
    assert log is not None
    pushes = await asyncio.to_thread(log.read, log.log_start, 10_000, 64 * 1024 * 1024)
    return [p for p in pushes if p.client_id == client_id]


async def wait_for_interval(server: Server, client_id: str, interval_ms: int) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while loop.time() < deadline:
        if any(p.push_interval_ms == interval_ms for p in await producer_pushes(server, client_id)):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_real_producer_pushes_at_the_altered_interval(tmp_path: Path) -> None:
    async with running(tmp_path, CONFIG) as server:
        assert server.listener is not None
        host, port = server.listener.bound_address
        producer = await asyncio.to_thread(
            RealClient, "producer", client_config(port, "altered-producer")
        )
        try:
            assert await wait_for_interval(server, "altered-producer", 1000)

            def alter() -> object:
                admin = admin_client(host, port)
                try:
                    return admin.alter_configs(
                        [subscription("telemetry", {"interval.ms": "200", "metrics": "*"})],
                        incremental=True,
                    )
                finally:
                    admin.close()

            altered = await asyncio.wait_for(asyncio.to_thread(alter), 60)
            picked_up = await wait_for_interval(server, "altered-producer", 200)
        finally:
            await asyncio.wait_for(asyncio.to_thread(producer.close), 30)
        pushes = await producer_pushes(server, "altered-producer")
    assert altered == {"client_metrics": {"telemetry": "OK"}}
    assert picked_up
    before = {p.subscription_id for p in pushes if p.push_interval_ms == 1000}
    after = {p.subscription_id for p in pushes if p.push_interval_ms == 200}
    # The producer re-fetched its subscription: a new subscription id (KIP-714).
    assert before and after and before.isdisjoint(after)
    assert pushes[-1].push_interval_ms == 200
