"""Agent Lightning's APO room-selector agent, ported to agl-stream (see docs/porting-from-agent-lightning.md).

The agent books a meeting room. Its prompt template (the resource APO tunes) is filled with the
request; the model may call the ``get_rooms_and_availability`` tool, then names a room; an LLM
judge scores the answer against the expected room. The structure and names follow upstream's
``examples/apo/room_selector.py``; the rooms, tasks and wording are this repository's own. The
endpoint comes from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``, as upstream.

``python room_selector.py`` runs one task through the whole pipeline with ``Trainer.dev`` and
logs its spans and the chat messages ``TraceToMessages`` rebuilds from them.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import List, Optional, Tuple, TypedDict, cast

from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from pydantic import BaseModel, Field
from rich.console import Console

from agl_stream import Trainer
from agl_stream.adapter import TraceToMessages
from agl_stream.litagent import rollout
from agl_stream.types import Dataset, PromptTemplate

console = Console()

TASKS_FILE = Path(__file__).with_name("room_tasks.jsonl")


class JudgeResponse(BaseModel):
    reason: str = Field(description="Why this score, in at most 100 characters.")
    score: float = Field(description="How well the chosen room matches the expected one, from 0 to 1.")


class Room(TypedDict):
    id: str
    capacity: int
    equipment: List[str]
    accessible: bool
    distance_m: int
    booked: List[Tuple[str, str, int]]


class RoomStatus(Room):
    free: bool


class AvailableRooms(TypedDict):
    rooms: List[RoomStatus]


class RoomRequirement(TypedDict):
    date: str
    time: str
    duration_min: int
    attendees: int
    needs: List[str]
    accessible_required: bool


class RoomSelectionTask(TypedDict):
    id: str
    task_input: RoomRequirement
    expected_choice: str


TOOL_DEFINITIONS: List[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_rooms_and_availability",
            "description": "List every meeting room (capacity, equipment, step-free access, walking distance) "
            "and whether it is free for the requested slot.",
            "parameters": {
                "type": "object",
                "properties": {
                    "date": {"type": "string", "description": "day of the meeting, YYYY-MM-DD"},
                    "time": {"type": "string", "description": "start time, HH:MM (24 h)"},
                    "duration_min": {"type": "integer", "description": "length of the meeting in minutes"},
                },
                "required": ["date", "time", "duration_min"],
            },
        },
    },
]


def prompt_template_baseline() -> PromptTemplate:
    """The seed template APO starts from: it states the request and nothing about how to choose."""
    return PromptTemplate(
        template="Book a meeting room on {date} at {time} for {duration_min} minutes and {attendees} people. "
        "Equipment needed: {needs}. Step-free access needed: {accessible_required}.",
        engine="f-string",
    )


def room_selection_grader(client: OpenAI, final_message: Optional[str], expected_choice: str) -> float:
    """An LLM judge compares the agent's answer with the expected room (structured output)."""
    prompt = (
        "Grade a meeting-room booking strictly.\n"
        f"Agent answer:\n{final_message}\n\n"
        f"Correct room:\n{expected_choice}\n\n"
        "Give a score between 0 and 1; partial credit is allowed."
    )
    judged = client.chat.completions.parse(
        model="gpt-4.1-mini",
        messages=[{"role": "user", "content": prompt}],
        response_format=JudgeResponse,
        temperature=0.0,
    )
    verdict = JudgeResponse.model_validate_json(judged.choices[0].message.content or "{}")
    console.print(f"[bold yellow]judge[/bold yellow] {verdict.score} ({verdict.reason})")
    return verdict.score


@rollout
def room_selector(task: RoomSelectionTask, prompt_template: PromptTemplate) -> float:
    """Ask the model for a room (it may look the rooms up with the tool first) and grade the answer."""
    client = OpenAI()
    model = "gpt-4.1-nano"
    user_message = prompt_template.format(**task["task_input"])
    messages: List[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You are a scheduling assistant."},
        {"role": "user", "content": user_message},
    ]
    first = client.chat.completions.create(
        model=model, messages=messages, tools=TOOL_DEFINITIONS, tool_choice="auto", temperature=0.0
    )
    reply = first.choices[0].message
    if not reply.tool_calls:
        return room_selection_grader(client, reply.content, task["expected_choice"])

    messages.append(
        {
            "role": "assistant",
            "content": reply.content,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in reply.tool_calls
                if c.type == "function"
            ],
        }
    )
    for call in reply.tool_calls:
        if call.type != "function" or call.function.name != "get_rooms_and_availability":
            raise ValueError(f"unexpected tool call: {call}")
        try:
            args = json.loads(call.function.arguments)
            output: object = get_rooms_and_availability(args["date"], args["time"], args["duration_min"])
        except Exception as exc:  # the model sees the error, as upstream
            output = {"error": str(exc), "traceback": traceback.format_exc()}
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(output)})
    final = client.chat.completions.create(model=model, messages=messages, temperature=0.0)
    final_message = final.choices[0].message.content
    console.print(f"[bold yellow]answer[/bold yellow] {final_message}")
    return room_selection_grader(client, final_message, task["expected_choice"])


# The tool's database: seven rooms, some booked on the days the tasks use.
ROOMS: List[Room] = [
    {"id": "Cedar", "capacity": 3, "equipment": ["tv"], "accessible": True, "distance_m": 8,
     "booked": [("2025-11-04", "09:00", 60)]},
    {"id": "Birch", "capacity": 5, "equipment": ["whiteboard", "tv"], "accessible": False, "distance_m": 15,
     "booked": [("2025-11-04", "13:00", 30)]},
    {"id": "Maple", "capacity": 6, "equipment": ["projector", "whiteboard"], "accessible": True, "distance_m": 20,
     "booked": [("2025-11-05", "10:00", 90)]},
    {"id": "Alder", "capacity": 8, "equipment": ["projector", "confphone"], "accessible": True, "distance_m": 35,
     "booked": [("2025-11-04", "11:00", 60), ("2025-11-05", "15:00", 30)]},
    {"id": "Spruce", "capacity": 10, "equipment": ["projector", "whiteboard", "confphone"], "accessible": False,
     "distance_m": 25, "booked": []},
    {"id": "Willow", "capacity": 12, "equipment": ["ledwall", "confphone", "whiteboard"], "accessible": True,
     "distance_m": 50, "booked": [("2025-11-05", "09:30", 60)]},
    {"id": "Oak", "capacity": 20, "equipment": ["projector", "ledwall", "confphone", "whiteboard", "tv"],
     "accessible": True, "distance_m": 60, "booked": [("2025-11-04", "14:00", 120)]},
]  # fmt: skip


def overlaps(start: str, duration: int, other_start: str, other_duration: int) -> bool:
    def minutes(hhmm: str) -> int:
        return int(hhmm[:2]) * 60 + int(hhmm[3:])

    a0, b0 = minutes(start), minutes(other_start)
    return max(a0, b0) < min(a0 + duration, b0 + other_duration)


def get_rooms_and_availability(date: str, time_str: str, duration_min: int) -> AvailableRooms:
    rooms: List[RoomStatus] = []
    for room in ROOMS:
        free = not any(day == date and overlaps(time_str, duration_min, start, length) for day, start, length in room["booked"])
        rooms.append(cast(RoomStatus, {**room, "free": free}))
    return {"rooms": rooms}


def load_room_tasks() -> Dataset[RoomSelectionTask]:
    tasks = [cast(RoomSelectionTask, json.loads(line)) for line in TASKS_FILE.read_text().splitlines() if line.strip()]
    return cast(Dataset[RoomSelectionTask], tasks)


def debug_room_selector(limit: int = 1) -> None:
    """Run ``limit`` task(s) through the pipeline; ``Baseline`` logs the spans and the rebuilt messages."""
    tasks = load_room_tasks()
    trainer = Trainer(
        n_runners=1,
        initial_resources={"main_prompt": prompt_template_baseline()},
        adapter=TraceToMessages(),
    )
    trainer.dev(room_selector, [tasks[i] for i in range(limit)])


if __name__ == "__main__":
    debug_room_selector()
