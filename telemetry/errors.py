"""Kafka's error codes as KIP-714 uses them, and the exceptions that carry them.

The codes are Apache Kafka's (``org.apache.kafka.common.protocol.Errors``);
clients react to each one differently (librdkafka and the Java client disable
telemetry for INVALID_REQUEST and INVALID_RECORD, re-fetch at once after
UNKNOWN_SUBSCRIPTION_ID and UNSUPPORTED_COMPRESSION_TYPE, retry after the
interval for THROTTLING_QUOTA_EXCEEDED and TELEMETRY_TOO_LARGE), so every
refusal names exactly one of them.

    TelemetryError
     ├── InvalidRequestError              42
     ├── InvalidConfigError               40
     │    └── ConfigError                 40  (a bad server setting: names key and value)
     ├── UnsupportedCompressionTypeError  76
     ├── InvalidRecordError               87
     ├── ThrottlingQuotaExceededError     89
     ├── UnknownSubscriptionIdError      117
     └── TelemetryTooLargeError          118
"""

from __future__ import annotations

import enum
from typing import ClassVar


class ErrorCode(enum.IntEnum):
    """Kafka protocol error codes used by kip714 (``Errors.java``)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    COORDINATOR_NOT_AVAILABLE = 15
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_VERSION = 35
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    UNSUPPORTED_COMPRESSION_TYPE = 76
    INVALID_RECORD = 87
    THROTTLING_QUOTA_EXCEEDED = 89
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118


class TelemetryError(Exception):
    """A request refused with a Kafka error code."""

    error_code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR


class InvalidRequestError(TelemetryError):
    error_code = ErrorCode.INVALID_REQUEST


class InvalidConfigError(TelemetryError, ValueError):
    error_code = ErrorCode.INVALID_CONFIG


class ConfigError(InvalidConfigError):
    """A server setting refused at start-up; the message names the key and the value."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"{key}: invalid value {value!r}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


class UnsupportedCompressionTypeError(TelemetryError):
    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class InvalidRecordError(TelemetryError):
    error_code = ErrorCode.INVALID_RECORD


class ThrottlingQuotaExceededError(TelemetryError):
    error_code = ErrorCode.THROTTLING_QUOTA_EXCEEDED


class UnknownSubscriptionIdError(TelemetryError):
    error_code = ErrorCode.UNKNOWN_SUBSCRIPTION_ID


class TelemetryTooLargeError(TelemetryError):
    error_code = ErrorCode.TELEMETRY_TOO_LARGE
