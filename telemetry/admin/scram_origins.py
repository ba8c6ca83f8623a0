"""Which SCRAM users were made while anybody could make them.

Without a ``[security]`` section every principal may alter SCRAM credentials
(a Kafka broker without an authorizer). A credential made then stays a valid
login once ``[security]`` is added, so the server names those users at start:
each credential record says whether ``[security]`` was set when it was made,
and records written before kip714 kept that are of unknown origin.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from telemetry.metastore import MetadataImage

_log = logging.getLogger(__name__)


def unsecured_scram_users(image: MetadataImage) -> tuple[list[str], list[str]]:
    """Users with a credential made without ``[security]``, and users of unknown origin."""
    without: set[str] = set()
    unknown: set[str] = set()
    for (user, _), secured in image.scram_origins.items():
        if secured is None:
            unknown.add(user)
        elif not secured:
            without.add(user)
    return sorted(without), sorted(unknown - without)


def warn_about_unsecured_scram_users(image: MetadataImage, security_configured: bool) -> None:
    """With ``[security]`` set: one warning naming every such user (nothing when there is none)."""
    if not security_configured:
        return
    without, unknown = unsecured_scram_users(image)
    parts = []
    if without:
        parts.append(f"made while no [security] section was set: {', '.join(without)}")
    if unknown:
        parts.append(f"of unknown origin (made before kip714 recorded it): {', '.join(unknown)}")
    if parts:
        _log.warning(
            "SCRAM users that anybody could have created can log in; "
            "delete or re-create them if they are not yours: %s",
            "; ".join(parts),
        )
