"""SCRAM credential records say whether [security] was set when made; a start with it names
the users that were made without it, or whose origin is unknown."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from telemetry.metastore import MetadataStore, UserScramCredentialRecord
from telemetry.wire.scram_messages import AlterUserScramCredentialsRequest
from tests.telemetry.kafka.test_kafka_security_listener import (
    SECURED,
    alter,
    login,
    upsertion,
)
from tests.telemetry.kafka_wire_client import WireClient
from tests.telemetry.server_support import running

if TYPE_CHECKING:
    from pathlib import Path


def _record(name: str, secured: bool | None) -> UserScramCredentialRecord:
    return UserScramCredentialRecord(
        name=name,
        mechanism=1,
        salt=b"salt",
        stored_key=b"s" * 32,
        server_key=b"k" * 32,
        iterations=4096,
        secured=secured,
    )


def test_the_origin_survives_the_log_and_snapshots(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path, snapshot_interval_records=2) as store:
        store.append([_record("yes", True), _record("no", False)])  # a snapshot
        store.append([_record("old", None)])
    with MetadataStore.open(tmp_path) as reopened:
        origins = dict(reopened.image.scram_origins)
    assert origins == {("yes", 1): True, ("no", 1): False, ("old", 1): None}


async def test_users_made_without_security_are_named_at_a_secured_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(tmp_path, "") as server:  # no [security]: anybody may alter
        assert server.listener is not None
        client = await WireClient.connect(*server.listener.bound_address, "t")
        try:
            made = await alter(
                client, AlterUserScramCredentialsRequest(upsertions=(upsertion("mallory"),))
            )
        finally:
            await client.close()
    with MetadataStore.open(tmp_path / "data") as store:  # as a store of an older kip714 holds
        store.append([_record("old", None)])
    with caplog.at_level(logging.WARNING, "telemetry.admin.scram_origins"):
        async with running(tmp_path, SECURED.format(reauth_ms=0)) as server:
            admin, _ = await login(server, "admin", "admin-pw")
            try:
                secured = await alter(
                    admin, AlterUserScramCredentialsRequest(upsertions=(upsertion("carol"),))
                )
            finally:
                await admin.close()
            assert server.metastore is not None
            origins = dict(server.metastore.image.scram_origins)
    assert made == {"mallory": (0, None)}
    assert secured == {"carol": (0, None)}
    assert origins == {("mallory", 1): False, ("old", 1): None, ("carol", 1): True}
    warnings = [r.getMessage() for r in caplog.records if r.name == "telemetry.admin.scram_origins"]
    assert len(warnings) == 1
    assert "no [security] section was set: mallory" in warnings[0]
    assert "unknown origin (made before kip714 recorded it): old" in warnings[0]
    assert "carol" not in warnings[0]
