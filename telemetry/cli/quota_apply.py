"""``kip714 quotas advise --apply``: kip714's own push quotas set through the admin API.

A dry run (without ``--apply``) prints the ``kip714 quotas`` commands; with
it, each entity's quotas are set over HTTP and read back, so an operator
sees the change in force rather than trusting the request. Kafka's quotas
are never applied here (kip714 is not the cluster): ``quota_advice``
prints their ``kafka-configs.sh`` commands, with the same entity arguments.
"""

from __future__ import annotations

import sys
from typing import Final

from quotas import DEFAULT

__all__ = ["DRY_RUN_URL", "entity_args", "set_push_quotas"]

#: What the dry run names when no ``--http`` is given.
DRY_RUN_URL: Final = "http://127.0.0.1:8714"

Changes = dict[tuple[str | None, str | None], dict[str, float]]


def entity_args(user: str | None, client: str | None) -> str:
    """kafka-configs.sh's (and kip714 quotas') entity arguments."""
    parts = []
    for entity_type, name in (("users", user), ("clients", client)):
        if name == DEFAULT:
            parts.append(f"--entity-type {entity_type} --entity-default")
        elif name is not None:
            parts.append(f"--entity-type {entity_type} --entity-name {name}")
    return " ".join(parts)


def set_push_quotas(
    changes: Changes, http: str | None, token: str | None, *, apply: bool, level: int
) -> int:
    """Print (dry run) or set through the admin API, then read back, ``--level``'s proposals."""
    if not changes:
        if apply:
            print(f"kip714 quotas advise: no push quota proposal at --level {level} to set")
        return 0
    url = http or DRY_RUN_URL
    if not apply:
        print(f"dry run (--apply sets these at {url}):")
        for (user, client), values in changes.items():
            shown = ",".join(f"{k}={round(v)}" for k, v in values.items())
            print(
                f"kip714 quotas --http {url} --alter {entity_args(user, client)} "
                f"--add-config {shown}"
            )
        return 0
    from telemetry.admin.admin_client import (  # noqa: PLC0415 - only --apply talks to a server
        AdminRefusedError,
        AdminUnreachableError,
        HttpAdminClient,
    )

    client_of = HttpAdminClient(url, token)
    for (user, client), values in changes.items():
        entity = {
            kind: name for kind, name in (("user", user), ("client-id", client)) if name is not None
        }
        named = ", ".join(f"{k}={v}" for k, v in entity.items())
        try:
            client_of.alter_quotas(entity, values, (), validate_only=False)
            found = [q for q in client_of.describe_quotas(entity) if q["entity"] == entity]
        except AdminRefusedError as refusal:
            print(f"kip714 quotas advise: {url} refused {named}: {refusal}", file=sys.stderr)
            return 1
        except AdminUnreachableError as error:
            print(f"kip714 quotas advise: {error}", file=sys.stderr)
            return 2
        dynamic = found[0]["dynamic"] if found else {}
        wrong = {k: v for k, v in values.items() if dynamic.get(k) != v}
        if wrong:
            print(
                f"kip714 quotas advise: {named}: read back {dynamic}, not {values}",
                file=sys.stderr,
            )
            return 1
        shown = ", ".join(f"{k}={round(v)}" for k, v in values.items())
        print(f"set {named}: {shown} (read back)")
    return 0
