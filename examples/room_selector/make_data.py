"""Generate the room-selection datasets (deterministic; the JSONL files are committed)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from examples.room_selector.rooms import ROOMS, best_room

HERE = Path(__file__).parent
EQUIPMENT = sorted({e for r in ROOMS for e in r.equipment})


def make(n: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    while len(rows) < n:
        task: dict[str, object] = {
            "id": f"room-{seed}-{len(rows)}",
            "attendees": rng.randint(2, 20),
            "needs": sorted(rng.sample(EQUIPMENT, rng.randint(0, 2))),
            "accessible": rng.random() < 0.3,
            "booked": sorted(rng.sample([r.id for r in ROOMS], rng.randint(0, 2))),
            "time": f"{rng.randint(9, 16)}:00",
        }
        answer = best_room(task)
        if answer is None:
            continue
        task["answer"] = answer
        rows.append(task)
    return rows


if __name__ == "__main__":
    for name, n, seed in (("train", 40, 11), ("val", 29, 12)):
        path = HERE / "data" / f"{name}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in make(n, seed)))
        print(f"wrote {path} ({n} rows)")
