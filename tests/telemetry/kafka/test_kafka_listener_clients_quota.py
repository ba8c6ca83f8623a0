"""A real librdkafka producer over its push byte quota keeps pushing, and its telemetry lands.

A push over quota is accepted (Kafka's produce semantics) and answered with a
throttle time; the server mutes the connection meanwhile. librdkafka waits
out the mute like any slow response: it is never disconnected for it and
its pushes keep landing, at the quota's pace.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from telemetry.enforcement import ClientQuotaSettings, Enforcement, QuotaSettings, ThrottleReason
from tests.telemetry.kafka_real_clients import RealClient, client_config, pushes_of
from tests.telemetry.kafka_wire_client import running_server

if TYPE_CHECKING:
    from pathlib import Path

CLIENT_ID = "kip714-quota-producer"
SUBSCRIPTION = {"metrics": "*", "interval.ms": "200", "match": f"client_id={CLIENT_ID}"}


async def test_librdkafka_under_a_byte_quota_keeps_pushing(tmp_path: Path) -> None:
    # Far below what a producer pushing every 200 ms sends (a few KB/s), so it
    # is throttled within its first seconds, by a little more each time.
    quotas = QuotaSettings(
        window_num=3,
        clients=(ClientQuotaSettings(client_id=CLIENT_ID, push_byte_rate=400.0),),
    )
    enforcer = Enforcement(quotas)
    async with running_server(tmp_path, subscription=SUBSCRIPTION, enforcement=enforcer) as server:
        producer = await asyncio.to_thread(
            RealClient, "producer", client_config(server.port, CLIENT_ID, log_level=4)
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20.0
        landed_after_throttle = 0
        while loop.time() < deadline:
            await asyncio.sleep(0.1)
            throttled = enforcer.tracker.counts[ThrottleReason.PUSH_BYTE_RATE]
            if throttled and not landed_after_throttle:
                landed_after_throttle = len(pushes_of(await server.pushes(), CLIENT_ID))
            if throttled >= 2 and len(pushes_of(await server.pushes(), CLIENT_ID)) >= (
                landed_after_throttle + 2
            ):
                break
        await asyncio.wait_for(asyncio.to_thread(producer.close), 10.0)
        pushes = pushes_of(await server.pushes(), CLIENT_ID)
        closed_for = dict(server.listener.stats.closed_for)
        refused = dict(server.manager.stats.push_responses)

    assert enforcer.tracker.counts[ThrottleReason.PUSH_BYTE_RATE] >= 2
    # Pushes kept landing after the throttling started ...
    assert landed_after_throttle > 0
    assert len(pushes) >= landed_after_throttle + 2
    # ... and every push was accepted: muting is not an error.
    assert set(refused) == {0}
    # The only closes are the client's own.
    assert set(closed_for) <= {"eof", "reset"}
