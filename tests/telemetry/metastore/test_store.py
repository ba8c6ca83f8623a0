"""The metadata store on a real directory: replay, torn tails, damage, snapshots, failures."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from telemetry.metastore import (
    ClientQuotaRecord,
    ConfigRecord,
    MetadataCorruptionError,
    MetadataImage,
    MetadataStore,
    MetadataStoreClosedError,
    MetadataStoreFailedError,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from telemetry.metastore.frames import FILE_MAGIC, HEAD
from telemetry.metastore.records import MAX_BODY
from telemetry.security import ScramMechanism, derive_credential


def _config(name: str, key: str, value: str | None) -> ConfigRecord:
    return ConfigRecord(resource_type=16, resource_name=name, name=key, value=value)


def _quota(user: str | None, key: str, value: float, remove: bool = False) -> ClientQuotaRecord:
    return ClientQuotaRecord(entity=(("user", user),), key=key, value=value, remove=remove)


def _scram(user: str) -> UserScramCredentialRecord:
    credential = derive_credential(ScramMechanism.SCRAM_SHA_256, "pw", salt=b"salt")
    return UserScramCredentialRecord(
        name=user,
        mechanism=1,
        salt=credential.salt,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
        iterations=credential.iterations,
    )


def _segments(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "meta").glob("*.log"))


def _snapshots(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "meta").glob("*.checkpoint"))


def test_changes_survive_a_reopen(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        store.append([_config("sub1", "metrics", "*"), _config("sub1", "interval.ms", "1000")])
        store.append([_quota(None, "push_byte_rate", 1024.0), _scram("alice")])
        store.append(
            [
                ClientQuotaRecord(
                    entity=(("ip", "10.0.0.1"),), key="connection_creation_rate", value=5
                )
            ]
        )
        expected = store.image
        assert store.next_offset == 5
    with MetadataStore.open(tmp_path) as reopened:
        assert reopened.image == expected
        assert reopened.next_offset == 5
    assert expected.client_metrics == {"sub1": {"metrics": "*", "interval.ms": "1000"}}
    assert expected.client_quotas == {
        (("user", None),): {"push_byte_rate": 1024.0},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
    }
    assert expected.ip_quotas == {"10.0.0.1": {"connection_creation_rate": 5.0}}
    assert set(expected.scram_credentials) == {("alice", 1)}


def test_deletes_and_removals_replay(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        store.append([_config("sub1", "metrics", "*"), _quota("bob", "request_percentage", 5.0)])
        store.append([_scram("bob")])
        store.append(
            [
                _config("sub1", "metrics", None),
                _quota("bob", "request_percentage", 0.0, remove=True),
                RemoveUserScramCredentialRecord(name="bob", mechanism=1),
            ]
        )
    with MetadataStore.open(tmp_path) as reopened:
        assert reopened.image == MetadataImage().apply([])
        assert reopened.image.client_metrics == {}
        assert reopened.next_offset == 6


def test_an_acknowledged_append_survives_kill_9(tmp_path: Path) -> None:
    child = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from telemetry.metastore import MetadataStore, ConfigRecord\n"
        "store = MetadataStore.open(Path(sys.argv[1]))\n"
        "record = ConfigRecord(resource_type=16, resource_name='s', name='metrics', value='*')\n"
        "store.append([record])\n"
        "print('acked', flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    assert result.returncode == -9, result.stderr
    assert result.stdout == "acked\n"
    with MetadataStore.open(tmp_path) as store:
        assert store.image.client_metrics == {"s": {"metrics": "*"}}


@pytest.mark.parametrize("cut", [1, 5, HEAD.size, HEAD.size + 3])
def test_a_torn_tail_is_cut_and_logged(
    tmp_path: Path, cut: int, caplog: pytest.LogCaptureFixture
) -> None:
    with MetadataStore.open(tmp_path) as store:
        store.append([_config("a", "metrics", "*")])
        store.append([_config("b", "metrics", "*"), _config("b", "interval.ms", "500")])
    segment = _segments(tmp_path)[0]
    intact = segment.stat().st_size
    with MetadataStore.open(tmp_path) as store:
        store.append([_config("c", "metrics", "*")])
    with segment.open("r+b") as file:
        file.truncate(segment.stat().st_size - cut)
    with caplog.at_level(logging.WARNING, "telemetry.metastore.store"):
        store = MetadataStore.open(tmp_path)
    assert "never acknowledged" in caplog.text
    assert segment.stat().st_size == intact
    assert set(store.image.client_metrics) == {"a", "b"}
    store.append([_config("d", "metrics", "*")])
    assert store.next_offset == 4
    store.close()
    with MetadataStore.open(tmp_path) as reopened:
        assert set(reopened.image.client_metrics) == {"a", "b", "d"}


def test_a_zero_filled_tail_is_cut(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        store.append([_config("a", "metrics", "*")])
    segment = _segments(tmp_path)[0]
    with segment.open("ab") as file:
        file.write(bytes(4096))
    with MetadataStore.open(tmp_path) as store:
        assert set(store.image.client_metrics) == {"a"}
    assert segment.stat().st_size < 4096


def test_damage_before_the_tail_refuses_to_open(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        store.append([_config("a", "metrics", "*")])
        store.append([_config("b", "metrics", "*")])
    segment = _segments(tmp_path)[0]
    data = bytearray(segment.read_bytes())
    data[len(FILE_MAGIC) + HEAD.size + 3] ^= 0x01  # inside the first batch's body
    segment.write_bytes(bytes(data))
    with pytest.raises(MetadataCorruptionError, match="not a torn write"):
        MetadataStore.open(tmp_path)


def test_a_lying_length_costs_no_allocation(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        store.append([_config("a", "metrics", "*")])
    segment = _segments(tmp_path)[0]
    with segment.open("ab") as file:
        file.write(HEAD.pack(MAX_BODY + 1, 0, 0))
    with MetadataStore.open(tmp_path) as store:  # the tail is cut, nothing allocated for it
        assert set(store.image.client_metrics) == {"a"}


def test_snapshots_bound_replay_and_drop_covered_segments(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with MetadataStore.open(tmp_path, snapshot_interval_records=4) as store:
        for i in range(10):
            store.append([_config(f"s{i}", "metrics", "*")])
        expected = store.image
    assert [path.name for path in _snapshots(tmp_path)] == ["00000000000000000008.checkpoint"]
    assert [path.name for path in _segments(tmp_path)] == ["00000000000000000008.log"]
    with caplog.at_level(logging.DEBUG, "telemetry.metastore.store"):
        reopened = MetadataStore.open(tmp_path, snapshot_interval_records=4)
    assert "snapshot at offset 8, 2 records replayed" in caplog.text
    assert reopened.image == expected
    reopened.append([_config("s0", "metrics", None)])
    reopened.close()
    with MetadataStore.open(tmp_path) as again:
        assert "s0" not in again.image.client_metrics
        assert again.next_offset == 11


def test_a_crash_inside_a_snapshot_leaves_a_consistent_store(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        for i in range(3):
            store.append([_config(f"s{i}", "metrics", "*")])
        expected = store.image
    meta = tmp_path / "meta"
    old_segment = _segments(tmp_path)[0].read_bytes()
    with MetadataStore.open(tmp_path) as store:
        store.snapshot()
    # Put back what a crash after the rename and before the deletion leaves,
    # plus the temporary file of a snapshot that never reached its rename.
    (meta / "00000000000000000000.log").write_bytes(old_segment)
    (meta / "00000000000000000009.checkpoint.tmp").write_bytes(b"partial")
    with MetadataStore.open(tmp_path) as store:
        assert store.image == expected
        assert store.next_offset == 3
    assert sorted(path.name for path in meta.iterdir()) == [
        "00000000000000000003.checkpoint",
        "00000000000000000003.log",
    ]


def test_a_damaged_snapshot_refuses_to_open(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        store.append([_config("a", "metrics", "*")])
        store.snapshot()
    snapshot = _snapshots(tmp_path)[0]
    snapshot.write_bytes(snapshot.read_bytes()[:-1])
    with pytest.raises(MetadataCorruptionError, match="snapshot"):
        MetadataStore.open(tmp_path)


def test_missing_records_refuse_to_open(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        store.append([_config("a", "metrics", "*")])
    _segments(tmp_path)[0].rename(tmp_path / "meta" / "00000000000000000005.log")
    with pytest.raises(MetadataCorruptionError, match="missing"):
        MetadataStore.open(tmp_path)


def test_a_failed_fsync_fails_the_store_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MetadataStore.open(tmp_path)
    store.append([_config("a", "metrics", "*")])

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(MetadataStoreFailedError):
        store.append([_config("b", "metrics", "*")])
    monkeypatch.undo()
    assert "b" not in store.image.client_metrics  # never acknowledged, never applied
    with pytest.raises(MetadataStoreFailedError):
        store.append([_config("c", "metrics", "*")])  # no retry on a descriptor fsync failed on
    store.close()
    with pytest.raises(MetadataStoreClosedError):
        store.append([_config("c", "metrics", "*")])


def test_concurrent_appends_from_threads_are_serialised(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path, snapshot_interval_records=7) as store:

        def writer(thread: int) -> None:
            for i in range(20):
                store.append([_config(f"t{thread}-{i}", "metrics", "*")])

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert store.next_offset == 80
        expected = store.image
    with MetadataStore.open(tmp_path) as reopened:
        assert reopened.image == expected
        assert len(reopened.image.client_metrics) == 80


def test_an_empty_append_writes_nothing(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path) as store:
        store.append([])
        assert store.next_offset == 0
    assert _segments(tmp_path)[0].read_bytes() == FILE_MAGIC


def test_a_failed_snapshot_is_logged_and_the_log_keeps_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = MetadataStore.open(tmp_path, snapshot_interval_records=2)

    def failing_replace(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with caplog.at_level(logging.ERROR, "telemetry.metastore.store"):
        store.append([_config("a", "metrics", "*"), _config("b", "metrics", "*")])
    assert "metadata snapshot at offset 2 failed" in caplog.text
    assert _snapshots(tmp_path) == []
    assert not list((tmp_path / "meta").glob("*.tmp"))
    monkeypatch.undo()
    store.append([_config("c", "metrics", "*")])  # still accepted; the snapshot is retried
    assert [path.name for path in _snapshots(tmp_path)] == ["00000000000000000003.checkpoint"]
    store.close()
    with MetadataStore.open(tmp_path) as reopened:
        assert set(reopened.image.client_metrics) == {"a", "b", "c"}
