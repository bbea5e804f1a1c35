"""The room-selection world: rooms, the booking rule, and the grader.

A task asks for a meeting room for some attendees with required equipment (and step-free access
when someone needs it). The right answer is the *smallest* free room that satisfies every
requirement (ties: lowest floor, then id). The reward is 1.0 for that room, 0.3 for a room that
satisfies the requirements but is not the best fit, 0.0 otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Room:
    id: str
    capacity: int
    floor: int
    equipment: frozenset[str]
    accessible: bool


ROOMS: tuple[Room, ...] = (
    Room("A101", 4, 1, frozenset({"whiteboard"}), True),
    Room("A102", 6, 1, frozenset({"screen", "whiteboard"}), True),
    Room("B201", 8, 2, frozenset({"projector", "whiteboard"}), False),
    Room("B202", 10, 2, frozenset({"projector", "video"}), True),
    Room("C301", 12, 3, frozenset({"screen", "video", "whiteboard"}), False),
    Room("C302", 16, 3, frozenset({"projector", "video", "whiteboard"}), True),
    Room("D401", 24, 4, frozenset({"projector", "screen", "video"}), True),
)
BY_ID = {room.id: room for room in ROOMS}


def feasible(room: Room, task: dict[str, Any]) -> bool:
    return (
        room.capacity >= task["attendees"]
        and set(task["needs"]) <= room.equipment
        and (room.accessible or not task["accessible"])
        and room.id not in task["booked"]
    )


def best_room(task: dict[str, Any]) -> Optional[str]:
    options = sorted((r for r in ROOMS if feasible(r, task)), key=lambda r: (r.capacity, r.floor, r.id))
    return options[0].id if options else None


def room_table() -> str:
    lines = ["id | capacity | floor | equipment | step-free access"]
    for r in ROOMS:
        lines.append(f"{r.id} | {r.capacity} | {r.floor} | {', '.join(sorted(r.equipment))} | {'yes' if r.accessible else 'no'}")
    return "\n".join(lines)


def parse_choice(reply: str) -> Optional[str]:
    """The last room id mentioned in the reply (models often reason first, answer last)."""
    found = re.findall(r"\b([A-D]\d{3})\b", reply or "")
    return found[-1] if found else None


def room_reward(reply: str, task: dict[str, Any]) -> float:
    choice = parse_choice(reply)
    if choice is None or choice not in BY_ID:
        return 0.0
    if choice == task["answer"]:
        return 1.0
    return 0.3 if feasible(BY_ID[choice], task) else 0.0
