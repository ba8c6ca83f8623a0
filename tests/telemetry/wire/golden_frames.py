"""Frames captured from librdkafka 2.16, without size prefix.

Built from annotated hex dumps so each part can be checked by eye; the
PushTelemetry payload is a stand-in of the captured length (463 bytes,
starting with the zstd magic), since the capture kept only its length.
"""

from __future__ import annotations

from typing import Final

CLIENT_ID: Final = "kip714-probe-producer"
_CID: Final = bytes.fromhex("0015") + CLIENT_ID.encode()

INSTANCE_ID_HEX: Final = "8892df0e16cf4209a8dca816a5e77f68"

API_VERSIONS_V3_REQUEST: Final = (
    bytes.fromhex("0012 0003 00000001") + _CID + b"\x00"
    + b"\x17" + b"confluent-kafka-python"
    + b"\x16" + b"2.16.1-rdkafka-2.16.0"
    + b"\x00"
)  # fmt: skip

API_VERSIONS_V3_RESPONSE: Final = bytes.fromhex(
    "00000001"  # correlation id, response header v0: no tag byte
    "0000"  # ErrorCode
    "07"  # ApiKeys: 6 entries
    "0012 0000 0004 00"
    "0003 0000 000c 00"
    "0047 0000 0000 00"
    "0048 0000 0000 00"
    "000a 0000 0006 00"  # FindCoordinator and InitProducerId, for the Java clients
    "0016 0000 0005 00"
    "00000000"  # ThrottleTimeMs
    "00"  # body tags
)

METADATA_V12_REQUEST: Final = (
    bytes.fromhex("0003 000c 00000002") + _CID + b"\x00" + bytes.fromhex("01 00 00 00")
)

METADATA_V12_RESPONSE: Final = (
    bytes.fromhex("00000002 00")  # correlation id, header tags
    + bytes.fromhex("00000000")  # ThrottleTimeMs
    + bytes.fromhex("02")  # Brokers: 1
    + bytes.fromhex("00000001 0a") + b"127.0.0.1" + bytes.fromhex("0000af23 00 00")
    + bytes.fromhex("15") + b"kip714-probe-cluster"
    + bytes.fromhex("00000001")  # ControllerId
    + bytes.fromhex("01")  # Topics: 0
    + bytes.fromhex("00")  # tags
)  # fmt: skip

GET_TELEMETRY_SUBSCRIPTIONS_V0_REQUEST: Final = (
    bytes.fromhex("0047 0000 00000003") + _CID + b"\x00" + bytes(16) + b"\x00"
)

GET_TELEMETRY_SUBSCRIPTIONS_V0_RESPONSE: Final = bytes.fromhex(
    "00000003 00"  # correlation id, header tags
    "00000000"  # ThrottleTimeMs
    "0000" + INSTANCE_ID_HEX + "50a263bd"  # ErrorCode  # SubscriptionId
    "05 04 03 01 02"  # AcceptedCompressionTypes [zstd, lz4, gzip, snappy]
    "000003e8"  # PushIntervalMs 1000
    "00100000"  # TelemetryMaxBytes 1048576
    "01"  # DeltaTemporality
    "02 02 2a"  # RequestedMetrics ["*"]
    "00"  # tags
)

PUSH_PAYLOAD: Final = bytes.fromhex("28b52ffd") + bytes(range(256)) + bytes(463 - 4 - 256)

PUSH_TELEMETRY_V0_REQUEST: Final = (
    bytes.fromhex("0048 0000 00000004") + _CID + b"\x00"
    + bytes.fromhex(INSTANCE_ID_HEX)
    + bytes.fromhex("50a263bd")  # SubscriptionId
    + b"\x00"  # Terminating
    + b"\x04"  # CompressionType zstd
    + bytes.fromhex("d003")  # uvarint 464 = 463 + 1
    + PUSH_PAYLOAD
    + b"\x00"
)  # fmt: skip

PUSH_TELEMETRY_V0_RESPONSE: Final = bytes.fromhex("00000004 00 00000000 0000 00")

ALL_REQUESTS: Final = (
    API_VERSIONS_V3_REQUEST,
    METADATA_V12_REQUEST,
    GET_TELEMETRY_SUBSCRIPTIONS_V0_REQUEST,
    PUSH_TELEMETRY_V0_REQUEST,
)
