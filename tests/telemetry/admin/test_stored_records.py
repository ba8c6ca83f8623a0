"""Records read back from a metadata store are judged by the admin plane's rules (issue 35, 9).

Whoever can write the shared topic (or an older version's local store) can
hand a node a key nested 50,000 deep, a NaN quota or ``interval.ms = -5``:
each is skipped and counted, the node goes on following and starting.
"""

from __future__ import annotations

import json
import math
import urllib.request
from typing import TYPE_CHECKING

import pytest

from telemetry.admin.stored import StoredRecordError, check_stored_state
from telemetry.errors import ErrorCode, InvalidConfigError, InvalidRequestError
from telemetry.metastore import (
    ClientQuotaRecord,
    ConfigRecord,
    MetadataRecord,
    MetadataStore,
    UserScramCredentialRecord,
)
from telemetry.metastore.entities import (
    ConfigEntity,
    QuotaEntityKey,
    encode_key,
    read_message,
)
from telemetry.metastore.records import RecordFormatError, encode_batch
from tests.telemetry.admin.admin_support import admin_client, subscription
from tests.telemetry.kafka_wire_client import WireClient
from tests.telemetry.serve_process import ServeProcess

if TYPE_CHECKING:
    from pathlib import Path

DEEP_KEY = b"[" * 50_000
NAN_QUOTA = ClientQuotaRecord(
    entity=(("client-id", "nan-app"),), key="push_byte_rate", value=math.nan
)
NEGATIVE_INTERVAL = (
    ConfigRecord(resource_type=16, resource_name="negative", name="interval.ms", value="-5"),
    ConfigRecord(resource_type=16, resource_name="negative", name="metrics", value="*"),
)
SLOW_LOGIN = UserScramCredentialRecord(
    name="slow", mechanism=1, salt=b"s" * 16, stored_key=b"k" * 32, server_key=b"v" * 32,
    iterations=10**9,
)  # fmt: skip
BAD_MATCH = ConfigRecord(
    resource_type=16, resource_name="bad-match", name="match", value="client_id=("
)
VALID_QUOTA = ClientQuotaRecord(entity=(("client-id", "kept"),), key="push_byte_rate", value=1e3)


def _value(*records: MetadataRecord) -> bytes:
    return encode_batch(0, records)


def test_a_key_nested_50000_deep_is_refused_as_a_record_not_a_recursion_error() -> None:
    entity, state, error = read_message(DEEP_KEY, b"junk", check_stored_state)
    assert (entity, state) == (None, ())
    assert isinstance(error, RecordFormatError)
    assert "nested too deep" in str(error)


@pytest.mark.parametrize(
    ("key", "records", "refusal"),
    [
        (encode_key(QuotaEntityKey(NAN_QUOTA.entity)), (NAN_QUOTA,), InvalidRequestError),
        (encode_key(ConfigEntity(16, "negative")), NEGATIVE_INTERVAL, InvalidRequestError),
        (b'["scram","slow",1]', (SLOW_LOGIN,), StoredRecordError),
        (encode_key(ConfigEntity(16, "bad-match")), (BAD_MATCH,), InvalidConfigError),
    ],
)
def test_a_message_the_admin_api_would_refuse_is_skipped_and_leaves_its_entity_empty(
    key: bytes, records: tuple[MetadataRecord, ...], refusal: type[Exception]
) -> None:
    entity, state, error = read_message(key, _value(*records), check_stored_state)
    assert entity is not None
    assert state == ()
    assert isinstance(error, refusal)
    # Without the rules the same message is taken: the check is what refuses it.
    assert read_message(key, _value(*records))[2] is None


def test_a_valid_message_passes_the_rules() -> None:
    key = encode_key(QuotaEntityKey(VALID_QUOTA.entity))
    assert read_message(key, _value(VALID_QUOTA), check_stored_state) == (
        QuotaEntityKey(VALID_QUOTA.entity),
        (VALID_QUOTA,),
        None,
    )


def _write_untrusted_store(data: Path) -> None:
    """What no admin request writes, appended straight into the local store's log."""
    with MetadataStore.open(data) as store:
        store.append([NAN_QUOTA])
        store.append(NEGATIVE_INTERVAL)
        store.append([VALID_QUOTA])
        store.append([SLOW_LOGIN])


def test_the_local_store_skips_and_counts_refused_batches_at_replay(tmp_path: Path) -> None:
    _write_untrusted_store(tmp_path)
    with MetadataStore.open(tmp_path, check=check_stored_state) as store:
        assert store.image.client_quotas == {VALID_QUOTA.entity: {"push_byte_rate": 1e3}}
        assert store.image.client_metrics == {}
        assert store.image.scram_credentials == {}
        assert store.stats.skipped_records == 4
        assert store.stats.applied_records == 1
        assert store.next_offset == 5  # skipped records keep their offsets
        store.snapshot()  # the snapshot holds only what was applied
    with MetadataStore.open(tmp_path, check=check_stored_state) as reopened:
        assert reopened.stats.skipped_records == 0
        assert reopened.image.client_quotas == {VALID_QUOTA.entity: {"push_byte_rate": 1e3}}


def test_a_snapshot_entity_the_rules_refuse_is_dropped_alone(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        store.append([NAN_QUOTA, VALID_QUOTA, *NEGATIVE_INTERVAL])
        store.snapshot()
    with MetadataStore.open(tmp_path, check=check_stored_state) as store:
        assert store.image.client_quotas == {VALID_QUOTA.entity: {"push_byte_rate": 1e3}}
        assert store.image.client_metrics == {}
        assert store.stats.skipped_records == 3


CONFIG = """
[subscriptions.base]
metrics = ["org.apache.kafka.producer."]
"interval.ms" = 60000
[exporters.landing]
enabled = false
[exporters.points]
type = "jsonl"
[exporters.points.options]
path = "{out}/"
"""


def _skipped_records(server: ServeProcess) -> float:
    host, port = server.http
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    prefix = "kip714_metadata_log_skipped_records_total "
    [line] = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(line.removeprefix(prefix))


async def test_a_server_starts_over_refused_records_and_takes_admin_changes(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    config = CONFIG.format(out=tmp_path / "out")
    _write_untrusted_store(data)
    server = ServeProcess(data, config).start()  # today's main refuses to start here
    try:
        assert _skipped_records(server) == 4.0
        admin = admin_client(*server.kafka)
        try:
            altered = admin.alter_configs(
                [subscription("fresh", {"metrics": "*", "interval.ms": "5000"})],
                incremental=True,
            )
            described = admin.describe_configs([subscription("fresh")])
        finally:
            admin.close()
        assert altered == {"client_metrics": {"fresh": "OK"}}
        assert {k: e["value"] for k, e in described["client_metrics"]["fresh"].items()} == {
            "metrics": "*",
            "interval.ms": "5000",
        }
        client = await WireClient.connect(*server.kafka, "after-untrusted")
        try:
            subscribed = await client.subscribe()
        finally:
            await client.close()
        assert subscribed.error_code == ErrorCode.NONE
        assert server.stop() == 0
        server = ServeProcess(data, config).start()  # and again, the records still in the log
        assert _skipped_records(server) == 4.0
        errors = [e for e in server.events() if e.get("level") == "error"]
        assert len(errors) == 3, json.dumps(errors)[:2000]  # one line per skipped batch
        assert server.stop() == 0
    finally:
        server.kill()
