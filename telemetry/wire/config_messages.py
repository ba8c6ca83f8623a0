"""DescribeConfigs (32) v1–4, IncrementalAlterConfigs (44) v0–1, ListConfigResources (74) v0–1.

The config half of the admin plane: how ``kafka-configs.sh`` and
``kafka-client-metrics.sh`` read, change and list client-metrics subscriptions
(config resource type 16). Field order and versions follow Kafka's
``DescribeConfigs{Request,Response}.json`` (flexible from v4; v0 was removed in
Kafka 4.0), ``IncrementalAlterConfigs{Request,Response}.json`` (flexible from v1)
and ``ListConfigResources{Request,Response}.json`` (KIP-1142's new name for
ListClientMetricsResources; flexible from v0, ResourceTypes and ResourceType
added in v1).

Fields a version does not carry decode to the schema default, so a handler
never needs the version to read a request.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self

from telemetry.wire.primitives import MAX_ADMIN_ITEMS

if TYPE_CHECKING:
    from telemetry.wire.primitives import Reader, Writer

DESCRIBE_CONFIGS_FLEXIBLE_SINCE: Final = 4
INCREMENTAL_ALTER_CONFIGS_FLEXIBLE_SINCE: Final = 1


class ConfigResourceType(enum.IntEnum):
    """``ConfigResource.Type`` ids; kip714 serves only CLIENT_METRICS."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(enum.IntEnum):
    """``DescribeConfigsResponse.ConfigSource``: where a described value comes from."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(enum.IntEnum):
    """``DescribeConfigsResponse.ConfigType`` (v3+): the ConfigDef type of a key."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterConfigOp(enum.IntEnum):
    """``AlterConfigOp.OpType`` ids of IncrementalAlterConfigs."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# ---------------------------------------------------------------- DescribeConfigs (32)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResource:
    """One resource to describe; ``configuration_keys`` None means every key."""

    resource_type: int
    resource_name: str
    configuration_keys: tuple[str, ...] | None = None


def _read_describe_resource(reader: Reader, flexible: bool) -> DescribeConfigsResource:
    resource_type = reader.int8()
    resource_name = reader.string(flexible)
    keys = reader.nullable_array(lambda r: r.string(flexible), flexible, limit=MAX_ADMIN_ITEMS)
    if flexible:
        reader.tagged_fields()
    return DescribeConfigsResource(
        resource_type=resource_type,
        resource_name=resource_name,
        configuration_keys=None if keys is None else tuple(keys),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsRequest:
    resources: tuple[DescribeConfigsResource, ...]
    include_synonyms: bool = False
    include_documentation: bool = False  # v3+

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= DESCRIBE_CONFIGS_FLEXIBLE_SINCE
        resources = tuple(
            reader.array(
                lambda r: _read_describe_resource(r, flexible), flexible, limit=MAX_ADMIN_ITEMS
            )
        )
        include_synonyms = reader.boolean()
        include_documentation = reader.boolean() if version >= 3 else False
        if flexible:
            reader.tagged_fields()
        return cls(
            resources=resources,
            include_synonyms=include_synonyms,
            include_documentation=include_documentation,
        )

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= DESCRIBE_CONFIGS_FLEXIBLE_SINCE
        writer.array_length(len(self.resources), flexible)
        for resource in self.resources:
            writer.int8(resource.resource_type)
            writer.string(resource.resource_name, flexible)
            keys = resource.configuration_keys
            writer.nullable_array_length(None if keys is None else len(keys), flexible)
            for key in keys or ():
                writer.string(key, flexible)
            if flexible:
                writer.tagged_fields()
        writer.boolean(self.include_synonyms)
        if version >= 3:
            writer.boolean(self.include_documentation)
        if flexible:
            writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsEntry:
    """One described key (the schema's ``DescribeConfigsResourceResult``).

    ``config_source`` defaults to -1 as in the schema; ``config_type`` and
    ``documentation`` exist on the wire from v3.
    """

    name: str
    value: str | None
    read_only: bool = False
    config_source: int = -1
    is_sensitive: bool = False
    synonyms: tuple[DescribeConfigsSynonym, ...] = ()
    config_type: int = ConfigType.UNKNOWN
    documentation: str | None = None


def _read_synonym(reader: Reader, flexible: bool) -> DescribeConfigsSynonym:
    synonym = DescribeConfigsSynonym(
        name=reader.string(flexible), value=reader.nullable_string(flexible), source=reader.int8()
    )
    if flexible:
        reader.tagged_fields()
    return synonym


def _read_entry(reader: Reader, version: int) -> DescribeConfigsEntry:
    flexible = version >= DESCRIBE_CONFIGS_FLEXIBLE_SINCE
    name = reader.string(flexible)
    value = reader.nullable_string(flexible)
    read_only = reader.boolean()
    config_source = reader.int8()
    is_sensitive = reader.boolean()
    synonyms = tuple(reader.array(lambda r: _read_synonym(r, flexible), flexible))
    config_type = ConfigType.UNKNOWN.value
    documentation = None
    if version >= 3:
        config_type = reader.int8()
        documentation = reader.nullable_string(flexible)
    if flexible:
        reader.tagged_fields()
    return DescribeConfigsEntry(
        name=name,
        value=value,
        read_only=read_only,
        config_source=config_source,
        is_sensitive=is_sensitive,
        synonyms=synonyms,
        config_type=config_type,
        documentation=documentation,
    )


def _write_entry(writer: Writer, entry: DescribeConfigsEntry, version: int) -> None:
    flexible = version >= DESCRIBE_CONFIGS_FLEXIBLE_SINCE
    writer.string(entry.name, flexible)
    writer.nullable_string(entry.value, flexible)
    writer.boolean(entry.read_only)
    writer.int8(entry.config_source)
    writer.boolean(entry.is_sensitive)
    writer.array_length(len(entry.synonyms), flexible)
    for synonym in entry.synonyms:
        writer.string(synonym.name, flexible)
        writer.nullable_string(synonym.value, flexible)
        writer.int8(synonym.source)
        if flexible:
            writer.tagged_fields()
    if version >= 3:
        writer.int8(entry.config_type)
        writer.nullable_string(entry.documentation, flexible)
    if flexible:
        writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResult:
    """The answer for one resource: an error, or its entries."""

    resource_type: int
    resource_name: str
    error_code: int = 0
    error_message: str | None = None
    configs: tuple[DescribeConfigsEntry, ...] = ()


def _read_result(reader: Reader, version: int) -> DescribeConfigsResult:
    flexible = version >= DESCRIBE_CONFIGS_FLEXIBLE_SINCE
    error_code = reader.int16()
    error_message = reader.nullable_string(flexible)
    resource_type = reader.int8()
    resource_name = reader.string(flexible)
    configs = tuple(reader.array(lambda r: _read_entry(r, version), flexible))
    if flexible:
        reader.tagged_fields()
    return DescribeConfigsResult(
        resource_type=resource_type,
        resource_name=resource_name,
        error_code=error_code,
        error_message=error_message,
        configs=configs,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResponse:
    results: tuple[DescribeConfigsResult, ...]
    throttle_time_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= DESCRIBE_CONFIGS_FLEXIBLE_SINCE
        throttle_time_ms = reader.int32()
        results = tuple(reader.array(lambda r: _read_result(r, version), flexible))
        if flexible:
            reader.tagged_fields()
        return cls(results=results, throttle_time_ms=throttle_time_ms)

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= DESCRIBE_CONFIGS_FLEXIBLE_SINCE
        writer.int32(self.throttle_time_ms)
        writer.array_length(len(self.results), flexible)
        for result in self.results:
            writer.int16(result.error_code)
            writer.nullable_string(result.error_message, flexible)
            writer.int8(result.resource_type)
            writer.string(result.resource_name, flexible)
            writer.array_length(len(result.configs), flexible)
            for entry in result.configs:
                _write_entry(writer, entry, version)
            if flexible:
                writer.tagged_fields()
        if flexible:
            writer.tagged_fields()


# ---------------------------------------------------------------- IncrementalAlterConfigs (44)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterableConfig:
    """One operation; ``config_operation`` is an :class:`AlterConfigOp` id.

    The value is nullable on the wire; Kafka refuses null for anything but
    DELETE (``ConfigAdminManager.preprocess``), which is the handler's job.
    """

    name: str
    config_operation: int
    value: str | None


def _read_alterable(reader: Reader, flexible: bool) -> AlterableConfig:
    config = AlterableConfig(
        name=reader.string(flexible),
        config_operation=reader.int8(),
        value=reader.nullable_string(flexible),
    )
    if flexible:
        reader.tagged_fields()
    return config


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfigsResource:
    resource_type: int
    resource_name: str
    configs: tuple[AlterableConfig, ...]


def _read_alter_resource(reader: Reader, flexible: bool) -> AlterConfigsResource:
    resource_type = reader.int8()
    resource_name = reader.string(flexible)
    configs = tuple(
        reader.array(lambda r: _read_alterable(r, flexible), flexible, limit=MAX_ADMIN_ITEMS)
    )
    if flexible:
        reader.tagged_fields()
    return AlterConfigsResource(
        resource_type=resource_type, resource_name=resource_name, configs=configs
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class IncrementalAlterConfigsRequest:
    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= INCREMENTAL_ALTER_CONFIGS_FLEXIBLE_SINCE
        resources = tuple(
            reader.array(
                lambda r: _read_alter_resource(r, flexible), flexible, limit=MAX_ADMIN_ITEMS
            )
        )
        validate_only = reader.boolean()
        if flexible:
            reader.tagged_fields()
        return cls(resources=resources, validate_only=validate_only)

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= INCREMENTAL_ALTER_CONFIGS_FLEXIBLE_SINCE
        writer.array_length(len(self.resources), flexible)
        for resource in self.resources:
            writer.int8(resource.resource_type)
            writer.string(resource.resource_name, flexible)
            writer.array_length(len(resource.configs), flexible)
            for config in resource.configs:
                writer.string(config.name, flexible)
                writer.int8(config.config_operation)
                writer.nullable_string(config.value, flexible)
                if flexible:
                    writer.tagged_fields()
            if flexible:
                writer.tagged_fields()
        writer.boolean(self.validate_only)
        if flexible:
            writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfigsResourceResponse:
    resource_type: int
    resource_name: str
    error_code: int = 0
    error_message: str | None = None


def _read_alter_response(reader: Reader, flexible: bool) -> AlterConfigsResourceResponse:
    error_code = reader.int16()
    error_message = reader.nullable_string(flexible)
    resource_type = reader.int8()
    resource_name = reader.string(flexible)
    if flexible:
        reader.tagged_fields()
    return AlterConfigsResourceResponse(
        resource_type=resource_type,
        resource_name=resource_name,
        error_code=error_code,
        error_message=error_message,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class IncrementalAlterConfigsResponse:
    responses: tuple[AlterConfigsResourceResponse, ...]
    throttle_time_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        flexible = version >= INCREMENTAL_ALTER_CONFIGS_FLEXIBLE_SINCE
        throttle_time_ms = reader.int32()
        responses = tuple(reader.array(lambda r: _read_alter_response(r, flexible), flexible))
        if flexible:
            reader.tagged_fields()
        return cls(responses=responses, throttle_time_ms=throttle_time_ms)

    def write(self, writer: Writer, version: int) -> None:
        flexible = version >= INCREMENTAL_ALTER_CONFIGS_FLEXIBLE_SINCE
        writer.int32(self.throttle_time_ms)
        writer.array_length(len(self.responses), flexible)
        for response in self.responses:
            writer.int16(response.error_code)
            writer.nullable_string(response.error_message, flexible)
            writer.int8(response.resource_type)
            writer.string(response.resource_name, flexible)
            if flexible:
                writer.tagged_fields()
        if flexible:
            writer.tagged_fields()


# ---------------------------------------------------------------- ListConfigResources (74)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListConfigResourcesRequest:
    """v0 (ListClientMetricsResources) has no fields and means CLIENT_METRICS only;
    in v1 an empty ``resource_types`` means every type the broker lists."""

    resource_types: tuple[int, ...] = ()

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        resource_types = (
            reader.int8_array(compact=True, limit=MAX_ADMIN_ITEMS) if version >= 1 else ()
        )
        reader.tagged_fields()
        return cls(resource_types=resource_types)

    def write(self, writer: Writer, version: int) -> None:
        if version >= 1:
            writer.int8_array(self.resource_types, compact=True)
        writer.tagged_fields()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigResource:
    """A listed resource; v0 carries only the name, whose type is CLIENT_METRICS."""

    resource_name: str
    resource_type: int = ConfigResourceType.CLIENT_METRICS


def _read_config_resource(reader: Reader, version: int) -> ConfigResource:
    name = reader.string(compact=True)
    resource_type = reader.int8() if version >= 1 else ConfigResourceType.CLIENT_METRICS.value
    reader.tagged_fields()
    return ConfigResource(resource_name=name, resource_type=resource_type)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListConfigResourcesResponse:
    config_resources: tuple[ConfigResource, ...]
    error_code: int = 0
    throttle_time_ms: int = 0

    @classmethod
    def read(cls, reader: Reader, version: int) -> Self:
        throttle_time_ms = reader.int32()
        error_code = reader.int16()
        resources = tuple(reader.array(lambda r: _read_config_resource(r, version), compact=True))
        reader.tagged_fields()
        return cls(
            config_resources=resources, error_code=error_code, throttle_time_ms=throttle_time_ms
        )

    def write(self, writer: Writer, version: int) -> None:
        writer.int32(self.throttle_time_ms)
        writer.int16(self.error_code)
        writer.array_length(len(self.config_resources), compact=True)
        for resource in self.config_resources:
            if version < 1 and resource.resource_type != ConfigResourceType.CLIENT_METRICS:
                raise ValueError(
                    f"ListConfigResources v0 lists only client-metrics resources, "
                    f"not type {resource.resource_type}"
                )
            writer.string(resource.resource_name, compact=True)
            if version >= 1:
                writer.int8(resource.resource_type)
            writer.tagged_fields()
        writer.tagged_fields()
