"""kafka-python's protocol modules, imported with its one known warning silenced.

kafka-python 3.0.12 loads its JSON schemas with ``importlib.resources.read_text`` and ``open_text``,
deprecated since Python 3.11; under ``filterwarnings = error`` the bare import fails.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    kafka_admin: Any = importlib.import_module("kafka.protocol.admin")
    kafka_sasl: Any = importlib.import_module("kafka.protocol.sasl")
    kafka_metadata: Any = importlib.import_module("kafka.protocol.metadata")
    kafka_transaction: Any = importlib.import_module("kafka.protocol.producer.transaction")
