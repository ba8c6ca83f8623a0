"""The shape docs/architecture.md promises: few modules on top, small ones, rooms without cycles.

import-linter checks the allowed arrows; these check what it cannot: the
size of the tree's top, of each module, and how many floors the rooms stack.
"""

from __future__ import annotations

from pathlib import Path

import grimp

TELEMETRY = Path(__file__).resolve().parents[2] / "telemetry"
MAX_TOP_MODULES = 6
MAX_MODULE_LINES = 600
MAX_FLOORS = 10


def _room(module: str) -> str:
    """``telemetry.kafka.apis`` -> ``telemetry.kafka``; a top module is its own room."""
    return ".".join(module.split(".")[:2])


def _room_graph() -> dict[str, set[str]]:
    graph = grimp.build_graph("telemetry", include_external_packages=False)
    rooms: dict[str, set[str]] = {}
    for module in graph.modules:
        imported = {_room(m) for m in graph.find_modules_directly_imported_by(module)}
        rooms.setdefault(_room(module), set()).update(imported - {_room(module)})
    return rooms


def test_at_most_six_modules_sit_directly_under_telemetry() -> None:
    top = sorted(path.name for path in TELEMETRY.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_no_module_is_over_600_lines() -> None:
    sizes = {
        str(path.relative_to(TELEMETRY)): len(path.read_text(encoding="utf-8").splitlines())
        for path in TELEMETRY.rglob("*.py")
    }
    assert {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}


def test_the_rooms_form_no_cycle_and_at_most_ten_floors() -> None:
    rooms = _room_graph()
    floors: dict[str, int] = {}
    visiting: list[str] = []

    def floor(room: str) -> int:
        """1 for a room importing no other; else one above the highest room it imports."""
        assert room not in visiting, f"import cycle: {' -> '.join([*visiting, room])}"
        if room not in floors:
            visiting.append(room)
            floors[room] = 1 + max((floor(r) for r in rooms.get(room, ())), default=0)
            visiting.pop()
        return floors[room]

    highest = max(floor(room) for room in rooms)
    assert highest <= MAX_FLOORS, floors
    # The doors stand on the ingress flow, which stands on the KIP-714 rules.
    assert floors["telemetry.kafka"] > floors["telemetry.ingress"] > floors["telemetry.core"]
    assert floors["telemetry.http"] > floors["telemetry.ingress"]
