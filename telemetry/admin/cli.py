"""``kip714 subscriptions`` and ``kip714 quotas``: kafka-configs.sh's verbs against kip714.

::

    kip714 subscriptions --bootstrap-server HOST:PORT --describe [--name N] [--all]
    kip714 subscriptions --http URL --alter --name N --add-config 'interval.ms=1000,metrics=*'
    kip714 subscriptions --http URL --alter --name N --delete-config match
    kip714 subscriptions --http URL --delete --name N
    kip714 quotas --http URL --describe [--entity-type users --entity-name alice]
    kip714 quotas --bootstrap-server HOST:PORT --alter --entity-type users --entity-default \\
        --add-config producer_byte_rate=1024

``--add-config`` takes ``k=v`` pairs separated by commas; a value that holds
commas is bracketed, as for kafka-configs.sh (``metrics=[a.,b.]``). Entities
pair each ``--entity-type`` (``users``, ``clients``, ``ips``) with the
``--entity-name`` or ``--entity-default`` after it. Output goes to stdout; a
refusal is one line on stderr and exit status 1, a usage or connection error
exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from quotas import DEFAULT
from telemetry.admin.admin_client import (
    AdminRefusedError,
    AdminUnreachableError,
    HttpAdminClient,
    KafkaAdminClient,
)
from telemetry.wire import WireError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from telemetry.admin.admin_client import AdminClient, Entity

#: kafka-configs.sh's entity types and the quota entity types they name.
ENTITY_TYPES: Final = {"users": "user", "clients": "client-id", "ips": "ip"}
TOKEN_ENVIRONMENT: Final = "KIP714_ADMIN_TOKEN"

#: The server's default ``[http] listen`` (``telemetry.server.config``, a layer above).
DEFAULT_LISTEN: Final = "127.0.0.1:8714"


class UsageError(Exception):
    """A command line that cannot be carried out (exit status 2)."""


def split_configs(text: str) -> dict[str, str]:
    """``k1=v1,k2=[a,b]`` → ``{"k1": "v1", "k2": "a,b"}`` (kafka-configs.sh's parser)."""
    pairs: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            pairs.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise UsageError(f"unbalanced brackets in --add-config {text!r}")
    pairs.append("".join(current))
    configs: dict[str, str] = {}
    for pair in pairs:
        if not pair.strip():
            continue
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise UsageError(f"--add-config entries are key=value, not {pair!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        configs[key.strip()] = value
    return configs


def _keys(values: Sequence[str]) -> list[str]:
    return [key.strip() for value in values for key in value.split(",") if key.strip()]


class _EntityAction(argparse.Action):
    """Pairs ``--entity-type`` with the ``--entity-name`` / ``--entity-default`` after it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        entities: list[list[str | None]] = namespace.entities
        if option_string == "--entity-type":
            if values not in ENTITY_TYPES:
                parser.error(f"--entity-type must be one of {', '.join(ENTITY_TYPES)}")
            entities.append([ENTITY_TYPES[str(values)], None])
            return
        if not entities or entities[-1][1] is not None:
            parser.error(f"{option_string} must follow an --entity-type")
        entities[-1][1] = DEFAULT if option_string == "--entity-default" else str(values)


def _parser(kind: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"kip714 {kind}",
        description=(
            "Describe and change client-metrics subscriptions (KIP-714) on a kip714 server."
            if kind == "subscriptions"
            else "Describe and change client quotas (users, clients, ips) on a kip714 server. "
            "kip714 quotas advise proposes quotas (Kafka's, and kip714's own, which it can set) "
            "from the lake (its own --help)."
        ),
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the Kafka listener")
    where.add_argument(
        "--http", metavar="URL", help="the HTTP listener, e.g. http://127.0.0.1:8714"
    )
    where.add_argument(
        "--config",
        metavar="FILE",
        help="the server's TOML configuration: its [http] listen (default 127.0.0.1:8714) "
        "and [admin] token, when neither --http nor --bootstrap-server is given",
    )
    parser.add_argument(
        "--token",
        help=f"the HTTP admin API's bearer token (default: ${TOKEN_ENVIRONMENT}, "
        "else --config's [admin] token)",
    )
    verbs = parser.add_mutually_exclusive_group(required=True)
    verbs.add_argument("--describe", action="store_true", help="show the configs")
    verbs.add_argument("--alter", action="store_true", help="change configs")
    if kind == "subscriptions":
        verbs.add_argument("--list", action="store_true", help="list subscription names")
        verbs.add_argument("--delete", action="store_true", help="remove every dynamic key")
        parser.add_argument("--name", "--entity-name", dest="name", help="the subscription")
        parser.add_argument(
            "--all", action="store_true", help="with --describe: the file's and default values too"
        )
    else:
        parser.set_defaults(entities=[])
        parser.add_argument("--entity-type", action=_EntityAction, help="users, clients or ips")
        parser.add_argument("--entity-name", action=_EntityAction, help="the entity's name")
        parser.add_argument(
            "--entity-default", action=_EntityAction, nargs=0, help="the default entity"
        )
    parser.add_argument(
        "--add-config", action="append", default=[], metavar="K=V,...", help="keys to set"
    )
    parser.add_argument(
        "--delete-config", action="append", default=[], metavar="K,...", help="keys to remove"
    )
    parser.add_argument(
        "--validate-only", action="store_true", help="check the change, store nothing"
    )
    return parser


def _client(args: argparse.Namespace) -> AdminClient:
    if args.http:
        return HttpAdminClient(args.http, args.token or os.environ.get(TOKEN_ENVIRONMENT))
    if args.bootstrap_server:
        return KafkaAdminClient(args.bootstrap_server)
    if args.config is None:
        raise UsageError("give --config FILE, --http URL or --bootstrap-server HOST:PORT")
    url, token = _http_of(args.config)
    return HttpAdminClient(url, args.token or os.environ.get(TOKEN_ENVIRONMENT) or token)


def _http_of(config: str) -> tuple[str, str | None]:
    """The running server's HTTP admin URL and token, as its config file states them."""
    try:
        document = tomllib.loads(Path(config).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UsageError(f"--config {config}: {error}") from None
    http = document.get("http", {})
    admin = document.get("admin", {})
    listen = http.get("listen", DEFAULT_LISTEN) if isinstance(http, dict) else DEFAULT_LISTEN
    token = admin.get("token") if isinstance(admin, dict) else None
    if not isinstance(listen, str) or ":" not in listen:
        raise UsageError(f"--config {config}: http.listen {listen!r} is not HOST:PORT")
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if isinstance(http, dict) and "tls" in http else "http"
    return f"{scheme}://{shown}:{port}", token if isinstance(token, str) else None


def _run(kind: str, argv: Sequence[str]) -> int:
    args = _parser(kind).parse_args(argv)
    try:
        client = _client(args)
        if kind == "subscriptions":
            _subscriptions(client, args)
        else:
            _quotas(client, args)
    except AdminRefusedError as refusal:
        print(f"kip714 {kind}: refused: {refusal}", file=sys.stderr)
        return 1
    except (UsageError, AdminUnreachableError, WireError) as error:
        print(f"kip714 {kind}: {error}", file=sys.stderr)
        return 2
    return 0


def _subscriptions(client: AdminClient, args: argparse.Namespace) -> None:
    if args.list:
        for name in client.list_subscriptions():
            print(name)
        return
    if args.describe:
        names = [args.name] if args.name else client.list_subscriptions()
        for name in names:
            _print_subscription(client.describe_subscription(name), show_all=args.all)
        return
    if not args.name:
        raise UsageError("--alter and --delete need --name")
    if args.delete:
        described = client.describe_subscription(args.name)
        dynamic = [
            k for k, c in described["configs"].items() if c["source"] == "CLIENT_METRICS_CONFIG"
        ]
        if not dynamic:
            raise UsageError(f"subscription {args.name!r} has no dynamic config to delete")
        client.alter_subscription(args.name, {}, dynamic, args.validate_only)
    else:
        configs = {k: v for text in args.add_config for k, v in split_configs(text).items()}
        deleted = _keys(args.delete_config)
        if not configs and not deleted:
            raise UsageError("--alter needs --add-config or --delete-config")
        client.alter_subscription(args.name, configs, deleted, args.validate_only)
    verb = "Validated" if args.validate_only else "Completed"
    print(f"{verb} updating config for client-metric {args.name}.")


def _print_subscription(described: dict[str, Any], *, show_all: bool) -> None:
    shown = [
        (key, config)
        for key, config in described["configs"].items()
        if show_all or config["source"] == "CLIENT_METRICS_CONFIG"
    ]
    print(f"{'All' if show_all else 'Dynamic'} configs for client-metric {described['name']} are:")
    for key, config in shown:
        print(f"  {key}={config['value']} source={config['source']}")


def _quotas(client: AdminClient, args: argparse.Namespace) -> None:
    entity: Entity = {}
    for entity_type, name in args.entities:
        if name is None:
            raise UsageError("each --entity-type needs an --entity-name or --entity-default")
        entity[entity_type] = name
    if args.describe:
        for found in client.describe_quotas(entity):
            names = ", ".join(f"{t}={n}" for t, n in found["entity"].items())
            values = found.get("in_force", found["dynamic"])
            shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
            print(f"Quota configs for {names} are {shown}")
        return
    if not entity:
        raise UsageError("--alter needs --entity-type with --entity-name or --entity-default")
    configs: dict[str, float] = {}
    for text in args.add_config:
        for key, value in split_configs(text).items():
            try:
                configs[key] = float(value)
            except ValueError:
                raise UsageError(f"quota {key} must be a number, not {value!r}") from None
    deleted = _keys(args.delete_config)
    if not configs and not deleted:
        raise UsageError("--alter needs --add-config or --delete-config")
    client.alter_quotas(entity, configs, deleted, args.validate_only)
    names = ", ".join(f"{t}={n}" for t, n in entity.items())
    print(f"{'Validated' if args.validate_only else 'Completed'} updating quotas for {names}.")


def subscriptions_main(argv: Sequence[str]) -> int:
    return _run("subscriptions", argv)


def quotas_main(argv: Sequence[str]) -> int:
    return _run("quotas", argv)
