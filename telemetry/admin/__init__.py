"""The admin plane served: Kafka's admin APIs, the HTTP admin API and the CLI.

Client-metrics subscriptions and client quotas changed at run time, kept in
the metadata store (``telemetry.metastore``) and applied on top of the config
file: :mod:`telemetry.admin.plane` holds the state, :mod:`.kafka_handlers`
and :mod:`.http_routes` are the two front doors, :mod:`.authorizer` decides
who may alter (and who may use every other door), :mod:`.scram` serves SCRAM
credentials, :mod:`.cli` is ``kip714 subscriptions`` / ``kip714 quotas``.
Only the light modules are re-exported here: the config loader imports this
package.
"""

from __future__ import annotations

from telemetry.admin.authorizer import Authorizer, principal_of
from telemetry.admin.settings import AdminSettings, parse_admin

__all__ = ["AdminSettings", "Authorizer", "parse_admin", "principal_of"]
