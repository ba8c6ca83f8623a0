"""SCRAM credential changes go through the admin plane's authorizer and mutation quota."""

from __future__ import annotations

from typing import TYPE_CHECKING

from telemetry.wire.admin_apis import AdminApiKey
from telemetry.wire.scram_messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from tests.telemetry.kafka.test_kafka_security_clients import sasl_frame
from tests.telemetry.kafka.test_kafka_security_listener import SECURED, login, upsertion
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path

QUOTA = '[[quotas.clients]]\nuser = "admin"\ncontroller_mutation_rate = 0.1\n'


async def test_credential_changes_draw_the_mutation_quota(tmp_path: Path) -> None:
    names = ("u1", "u2", "u3", "u4", "u5")
    async with running(tmp_path, SECURED.format(reauth_ms=0) + QUOTA) as server:
        client, _ = await login(server, "admin", "admin-pw")
        try:
            request = AlterUserScramCredentialsRequest(
                upsertions=tuple(upsertion(name) for name in names)
            )
            _, answer = await sasl_frame(
                client, AdminApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, request
            )
        finally:
            await client.close()
        assert server.metastore is not None
        stored = {user for user, _ in server.metastore.image.scram_credentials}
    assert isinstance(answer, AlterUserScramCredentialsResponse)
    codes = {result.user: result.error_code for result in answer.results}
    admitted = sorted(user for user, code in codes.items() if code == 0)
    refused = sorted(user for user, code in codes.items() if code == 89)
    assert sorted(admitted + refused) == list(names)
    assert admitted and refused  # a burst of 0.1 x 11 s: one or two users, not five
    assert admitted == list(names[: len(admitted)])  # the first users in the request
    assert stored == set(admitted)
    assert answer.throttle_time_ms > 0
