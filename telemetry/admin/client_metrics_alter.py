"""IncrementalAlterConfigs on a client-metrics resource, as Kafka 4.0 evaluates it.

Three steps, in Kafka's order:

1. The broker's ``ConfigAdminManager.preprocess``: a resource named twice in
   one request, a key twice in one resource, or a null value on anything but
   DELETE is INVALID_REQUEST (42).
2. The controller's ``ConfigurationControlManager.incrementalAlterConfigResource``
   applies the operations to the stored keys: SET replaces, DELETE removes,
   APPEND / SUBTRACT add or remove comma-separated items of a LIST key
   (``metrics``, ``match``) and are INVALID_CONFIG (40) on any other key.
3. ``ClientMetricsConfigs.validate`` judges the *merged* result
   (:func:`telemetry.core.subscriptions.validate_subscription`: empty name, unknown
   key, interval range → 42; unparsable interval, bad match pattern → 40).

Only keys whose value changed become ConfigRecords; an alteration that
leaves no key removes the subscription, as Kafka's ``updateSubscription(name, {})``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from telemetry.core.subscriptions import MATCH_CONFIG, METRICS_CONFIG, validate_subscription
from telemetry.errors import InvalidConfigError, InvalidRequestError
from telemetry.metastore.image import CLIENT_METRICS_RESOURCE
from telemetry.metastore.records import ConfigRecord
from telemetry.wire.config_messages import AlterConfigOp

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from telemetry.core.subscriptions import Subscription
    from telemetry.wire.config_messages import AlterableConfig, AlterConfigsResource

DUPLICATE_RESOURCE_MESSAGE: Final = "Each resource must appear at most once."
_LIST_KEYS: Final = frozenset({METRICS_CONFIG, MATCH_CONFIG})


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientMetricsAlteration:
    """The outcome of a valid alteration: what to store and what it means.

    ``subscription`` is None when the alteration leaves no key (the
    subscription is removed). ``records`` is empty when nothing changed.
    """

    name: str
    config: Mapping[str, str]
    records: tuple[ConfigRecord, ...]
    subscription: Subscription | None


def duplicate_resources(resources: Sequence[AlterConfigsResource]) -> frozenset[tuple[int, str]]:
    """The (type, name) pairs named more than once: each gets 42 with
    :data:`DUPLICATE_RESOURCE_MESSAGE` and none of them is altered."""
    seen: set[tuple[int, str]] = set()
    repeated: set[tuple[int, str]] = set()
    for resource in resources:
        key = (resource.resource_type, resource.resource_name)
        (repeated if key in seen else seen).add(key)
    return frozenset(repeated)


def _parts(value: str | None) -> list[str]:
    # ConfigurationControlManager.getParts: the stored value (the default of a
    # client-metrics LIST key is empty) split on ",", empty items dropped.
    return [part for part in (value or "").split(",") if part]


def _preprocess(ops: Sequence[AlterableConfig]) -> None:
    seen: set[str] = set()
    for op in ops:
        if op.name in seen:
            raise InvalidRequestError("Error due to duplicate config keys")
        seen.add(op.name)
        if op.value is None and op.config_operation != AlterConfigOp.DELETE:
            raise InvalidRequestError(f"Null value not supported for : {op.name}")


def apply_ops(current: Mapping[str, str], ops: Sequence[AlterableConfig]) -> dict[str, str]:
    """The stored keys after ``ops`` (step 2), before validation.

    Raises:
        InvalidRequestError: an operation id Kafka does not define.
        InvalidConfigError: APPEND or SUBTRACT on a key that is not a LIST.
    """
    merged = dict(current)
    for op in ops:
        operation = op.config_operation
        if operation == AlterConfigOp.SET:
            merged[op.name] = op.value or ""
        elif operation == AlterConfigOp.DELETE:
            merged.pop(op.name, None)
        elif operation in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            name = AlterConfigOp(operation).name
            if op.name not in _LIST_KEYS:
                raise InvalidConfigError(
                    f"Can't {name} to key {op.name} because its type is not LIST."
                )
            items = _parts(merged.get(op.name))
            changes = (op.value or "").split(",")
            if operation == AlterConfigOp.APPEND:
                items.extend(item for item in changes if item not in items)
            else:
                items = [item for item in items if item not in changes]
            merged[op.name] = ",".join(items)
        else:
            raise InvalidRequestError(f"Unknown alter config operation type {operation}")
    return merged


def check_stored_client_metrics(resource_type: int, name: str, config: Mapping[str, str]) -> None:
    """IncrementalAlterConfigs' rules on a subscription read back from the metadata store.

    Raises:
        InvalidRequestError, InvalidConfigError: what IncrementalAlterConfigs
            would answer for the same keys.
    """
    if resource_type != CLIENT_METRICS_RESOURCE:
        raise InvalidRequestError(f"Unsupported resource type: {resource_type}")
    validate_subscription(name, config)


def alter_client_metrics(
    name: str, current: Mapping[str, str], ops: Sequence[AlterableConfig]
) -> ClientMetricsAlteration:
    """Evaluate the alteration of subscription ``name`` whose stored keys are ``current``.

    Raises:
        InvalidRequestError: 42, with Kafka's message.
        InvalidConfigError: 40, with Kafka's message.
    """
    _preprocess(ops)
    merged = apply_ops(current, ops)
    subscription = validate_subscription(name, merged)
    records = tuple(
        ConfigRecord(
            resource_type=CLIENT_METRICS_RESOURCE,
            resource_name=name,
            name=key,
            value=merged.get(key),
        )
        for key in sorted(set(current) | set(merged))
        if current.get(key) != merged.get(key)
    )
    return ClientMetricsAlteration(
        name=name, config=merged, records=records, subscription=subscription
    )
