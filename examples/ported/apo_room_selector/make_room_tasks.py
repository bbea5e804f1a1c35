"""Write ``room_tasks.jsonl``: meeting requests with the room a careful booker would pick.

The rule behind ``expected_choice`` (the judge's reference): among rooms free for the slot, with
enough seats, every needed item of equipment and step-free access when asked, take the one with
the fewest spare seats, then the fewest unneeded items, then the shortest walk; ``No Room`` when
none qualifies.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from room_selector import ROOMS, get_rooms_and_availability

HERE = Path(__file__).parent
EQUIPMENT = ["tv", "whiteboard", "projector", "confphone", "ledwall"]


def best_room(request: dict[str, Any]) -> str:
    rooms = get_rooms_and_availability(request["date"], request["time"], request["duration_min"])["rooms"]
    fits = [
        r for r in rooms
        if r["free"] and r["capacity"] >= request["attendees"] and set(request["needs"]) <= set(r["equipment"])
        and (r["accessible"] or not request["accessible_required"])
    ]  # fmt: skip
    if not fits:
        return "No Room"
    key = lambda r: (r["capacity"] - request["attendees"], len(r["equipment"]) - len(request["needs"]), r["distance_m"])  # noqa: E731
    return min(fits, key=key)["id"]


def make(n: int = 40, seed: int = 11) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        request = {
            "date": rng.choice(["2025-11-04", "2025-11-05"]),
            "time": rng.choice(["09:00", "09:30", "10:00", "11:00", "13:00", "14:30", "15:00"]),
            "duration_min": rng.choice([30, 60, 90]),
            "attendees": rng.randint(2, 14),
            "needs": sorted(rng.sample(EQUIPMENT, rng.choice([0, 1, 1, 2]))),
            "accessible_required": rng.random() < 0.3,
        }
        tasks.append({"id": f"room-{i:03d}", "task_input": request, "expected_choice": best_room(request)})
    return tasks


if __name__ == "__main__":
    rows = make()
    (HERE / "room_tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"wrote {len(rows)} tasks; expected choices: {sorted({r['expected_choice'] for r in rows})}")
