"""Find exporter factories by type name, through ``kip714.exporters`` entry points.

Built-in exporters are registered through the same entry points as
third-party plugins (kip714's own ``pyproject.toml`` declares ``jsonl``), so
first-party code takes the path plugins take and a broken packaging of either
shows up the same way. Factories registered in-process with ``register`` (test
doubles, embedding applications) sit beside the entry points.

The entry-point selection is read once per process, because scanning every
installed distribution's metadata is slow; ``refresh`` re-reads it after
installing a plugin into a running interpreter (tests).

Errors::

    RegistryError
     ├── ExporterNotFoundError   (also LookupError) no such type name
     ├── ExporterLoadError       the entry point exists but cannot be used
     │    └── ExporterConflictError   two distributions claim one name
     └── ExporterConfigError     (also ValueError) the factory refused its options
"""

from __future__ import annotations

import importlib.metadata
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from exporters.api import Exporter

if TYPE_CHECKING:
    from collections.abc import Mapping

    from exporters.api import ExporterFactory

__all__ = [
    "ENTRY_POINT_GROUP",
    "RETIRED",
    "ExporterConfigError",
    "ExporterConflictError",
    "ExporterLoadError",
    "ExporterNotFoundError",
    "RegistryError",
    "RetiredExporterError",
    "available",
    "create",
    "load",
    "refresh",
    "register",
    "unregister",
]

ENTRY_POINT_GROUP = "kip714.exporters"

_entry_points: dict[str, list[importlib.metadata.EntryPoint]] | None = None
_registered: dict[str, ExporterFactory] = {}


class RegistryError(Exception):
    """An exporter type could not be turned into a working exporter."""


class ExporterNotFoundError(RegistryError, LookupError):
    """No installed distribution provides the requested exporter type."""

    def __init__(self, type_name: str, available_names: list[str]) -> None:
        self.type_name = type_name
        self.available = available_names
        names = ", ".join(available_names) or "none"
        super().__init__(
            f"no exporter type {type_name!r} in entry-point group {ENTRY_POINT_GROUP!r} "
            f"(available: {names}); install the package that provides it (plugins are "
            f"conventionally named kip714-exporter-{type_name}) into this environment; "
            f'it must declare [project.entry-points."{ENTRY_POINT_GROUP}"] '
            f'{type_name} = "module:Factory"'
        )


class RetiredExporterError(ExporterNotFoundError):
    """A type this version no longer ships; the message says where its data goes now."""

    def __init__(self, type_name: str, available_names: list[str], move: str) -> None:
        super().__init__(type_name, available_names)
        self.args = (f"exporter type {type_name!r} is retired: {move}",)


_OWN_DIST: Final = "kip714"
#: Built-in types that are gone, and how to move a data directory that used one.
RETIRED: Final[Mapping[str, str]] = {
    "parquet": (
        'land into the Iceberg table instead (type = "iceberg", the default landing) and '
        "append the old files once with `kip714 lake import-parquet --config FILE`"
    ),
}


class ExporterLoadError(RegistryError):
    """The entry point exists but importing or using its target failed."""


class ExporterConflictError(ExporterLoadError):
    """Two different distributions register the same exporter type name.

    Refused rather than resolved by install order, which differs between
    machines and would make a configuration mean different things.
    """


class ExporterConfigError(RegistryError, ValueError):
    """An exporter's factory refused its ``options``.

    Attributes:
        instance_name: The configured exporter's name (``[exporters.NAME]``).
        type_name: Its ``type``.
        key: The option named in the factory's error, when one could be
            identified, else ``None``.
        value: That option's configured value (``None`` when ``key`` is).
    """

    def __init__(
        self,
        instance_name: str,
        type_name: str,
        key: str | None,
        value: Any,
        reason: str,
    ) -> None:
        self.instance_name = instance_name
        self.type_name = type_name
        self.key = key
        self.value = value
        self.reason = reason
        where = f"exporters.{instance_name}.options"
        if key is not None:
            where = f"{where}.{key} = {value!r}"
        super().__init__(f"{where}: {reason} (exporter type {type_name!r})")


def refresh() -> None:
    """Forget the cached entry-point selection; the next lookup re-reads it."""
    global _entry_points  # noqa: PLW0603 -- a process-wide cache is the point
    _entry_points = None


def register(name: str, factory: ExporterFactory, *, replace: bool = False) -> None:
    """Make ``factory`` available as type ``name`` without installing a distribution.

    Raises:
        ExporterConflictError: ``name`` is already taken (by an entry point
            or an earlier ``register``) and ``replace`` is false.
    """
    if not replace and (name in _registered or name in _selection()):
        raise ExporterConflictError(f"exporter type {name!r} is already registered")
    _registered[name] = factory


def unregister(name: str) -> None:
    """Remove a factory added with ``register``; unknown names are ignored."""
    _registered.pop(name, None)


def available() -> list[str]:
    """Every exporter type name that ``load`` may resolve, sorted."""
    return sorted({*_selection(), *_registered})


def load(type_name: str) -> ExporterFactory:
    """The factory for ``type_name``, importing its module if needed.

    Raises:
        ExporterNotFoundError: No entry point or registration has that name.
        ExporterConflictError: Two distributions declare that name.
        ExporterLoadError: The target cannot be imported or is not callable.
    """
    if type_name in _registered:
        return _registered[type_name]
    candidates = _selection().get(type_name)
    if not candidates and type_name in RETIRED:
        raise RetiredExporterError(type_name, available(), RETIRED[type_name])
    if not candidates:
        raise ExporterNotFoundError(type_name, available())
    distinct = {(_dist_name(ep), ep.value) for ep in candidates}
    if len(distinct) > 1:
        claims = "; ".join(f"{dist} ({value})" for dist, value in sorted(distinct))
        raise ExporterConflictError(
            f"exporter type {type_name!r} is declared by more than one distribution: "
            f"{claims}; uninstall one of them"
        )
    entry_point = candidates[0]
    try:
        factory = entry_point.load()
    except Exception as exc:
        raise ExporterLoadError(
            f"exporter type {type_name!r} ({entry_point.value}, from "
            f"{_dist_name(entry_point)}) failed to import: {exc!r}"
        ) from exc
    if not callable(factory):
        raise ExporterLoadError(
            f"exporter type {type_name!r} names {entry_point.value}, which is not callable"
        )
    loaded: ExporterFactory = factory
    return loaded


def create(instance_name: str, type_name: str, options: Mapping[str, Any]) -> Exporter:
    """Build the exporter configured as ``[exporters.<instance_name>]``.

    The factory gets a read-only copy of ``options``, so it cannot alter the
    loaded configuration.

    Raises:
        ExporterNotFoundError, ExporterConflictError, ExporterLoadError: See ``load``.
        ExporterConfigError: The factory raised ``TypeError`` or ``ValueError``.
    """
    factory = load(type_name)
    frozen = MappingProxyType(dict(options))
    try:
        exporter = factory(frozen)
    except (TypeError, ValueError) as exc:
        key = _key_in(exc, frozen)
        raise ExporterConfigError(
            instance_name,
            type_name,
            key,
            frozen.get(key) if key is not None else None,
            str(exc) or type(exc).__name__,
        ) from exc
    if not isinstance(exporter, Exporter):
        raise ExporterLoadError(
            f"exporter type {type_name!r} returned {type(exporter).__name__}, which lacks "
            "the Exporter methods (start, export, flush, close)"
        )
    return exporter


def _key_in(exc: BaseException, options: Mapping[str, Any]) -> str | None:
    """The option the factory complained about: its ``key`` attribute, or a key it names."""
    key = getattr(exc, "key", None)
    if isinstance(key, str):
        return key
    message = str(exc)
    quoted = [k for k in options if f"'{k}'" in message or f'"{k}"' in message]
    named = quoted or [k for k in options if k in message]
    # The longest match, so an error about "paths" is not pinned on "path".
    return max(named, key=len) if named else None


def _dist_name(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = entry_point.dist
    return dist.name if dist is not None else "<unknown distribution>"


def _selection() -> dict[str, list[importlib.metadata.EntryPoint]]:
    global _entry_points  # noqa: PLW0603 -- a process-wide cache is the point
    if _entry_points is None:
        found: dict[str, list[importlib.metadata.EntryPoint]] = {}
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if entry_point.name in RETIRED and _dist_name(entry_point) == _OWN_DIST:
                continue  # the metadata of an install from before it was retired
            found.setdefault(entry_point.name, []).append(entry_point)
        _entry_points = found
    return _entry_points
