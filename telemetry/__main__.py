"""``python -m telemetry`` is the ``kip714`` command."""

from __future__ import annotations

from telemetry.cli.main import main

raise SystemExit(main())
