"""A room-selection agent whose prompt template is tuned by APO.

The prompt template resource (``prompt_template``) is formatted with the task and the room table;
the LLM names a room; ``rooms.room_reward`` grades it. APO rewrites the template between rounds.
"""

from __future__ import annotations

from typing import Any

from openai import OpenAI

from agl_stream.litagent import rollout
from agl_stream.types import LLM, PromptTemplate
from examples.room_selector.rooms import room_reward, room_table

INITIAL_TEMPLATE = (
    "Pick a meeting room.\n"
    "Rooms:\n{rooms}\n\n"
    "Meeting at {time} for {attendees} people. Needs: {needs}. Step-free access required: {accessible}. "
    "Already booked: {booked}.\n"
    "Answer with the room id."
)


def render(template: PromptTemplate, task: dict[str, Any]) -> str:
    return template.format(
        rooms=room_table(),
        time=task["time"],
        attendees=task["attendees"],
        needs=", ".join(task["needs"]) or "nothing special",
        accessible="yes" if task["accessible"] else "no",
        booked=", ".join(task["booked"]) or "none",
    )


@rollout
def room_selector(task: dict[str, Any], prompt_template: PromptTemplate, llm: LLM) -> float:
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=2, timeout=120)
    reply = client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": render(prompt_template, task)}],
        max_tokens=48,
        temperature=0.0,
        **llm.sampling_parameters,
    )
    return room_reward(reply.choices[0].message.content or "", task)
