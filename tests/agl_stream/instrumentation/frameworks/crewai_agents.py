"""The CrewAI agent of ``test_crewai.py``, run by a runner process in the frameworks side venv.

CrewAI cannot install beside the stack's pins, so the runner that loads this agent (``agl-stream runner --agent``)
is a side-venv process. The module imports ``crewai`` only inside the rollout, which activates its tracing there,
so the test process can import it for its names. The crew is sequential:
a ``calculator`` agent multiplies the task's numbers with the ``multiply`` tool, then a ``writer`` agent
reports the product from the calculator's output as a structured :class:`Report` (``output_pydantic``, which
CrewAI asks the openai client's ``parse`` for, or its ``stream`` when streaming).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from agl_stream.litagent import rollout
from agl_stream.types import LLM

CALCULATOR, WRITER = "calculator", "writer"
#: CrewAI's own opt-outs: its anonymous telemetry and its tracing service export over the network (none here),
#: and its version check asks PyPI. OTEL_SDK_DISABLED, which CrewAI also honours, would stop agl-stream's tracing.
CREWAI_OFFLINE = {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false",
                  "CREWAI_DISABLE_VERSION_CHECK": "true"}  # fmt: skip


def question(task: dict[str, Any]) -> str:
    return f"what is {task['a']} times {task['b']}"


class Report(BaseModel):
    sentence: str


def report(product: int) -> str:
    return f"Report: the product is {product}"


@rollout
def crewai_agent(task: dict[str, Any], llm: LLM) -> float:
    """One crew run: ``kickoff`` (or ``kickoff_async``, which runs it in a thread), streamed when the task says."""
    from crewai import LLM as CrewLLM
    from crewai import Agent, Crew, Process, Task
    from crewai.tools import tool

    @tool("multiply")
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    # CrewAI's native OpenAI provider: the openai client against the engine's OpenAI-compatible endpoint
    model = CrewLLM(model=f"openai/{llm.model}", base_url=llm.endpoint, api_key="unused", stream=task["stream"])
    calculator = Agent(role=CALCULATOR, goal="Multiply numbers with the multiply tool.",
                       backstory="A careful calculator.", tools=[multiply], llm=model, max_iter=3)  # fmt: skip
    writer = Agent(role=WRITER, goal="Report results in one sentence.", backstory="A concise writer.", llm=model,
                   max_iter=2)  # fmt: skip
    compute = Task(name="compute", description=question(task), expected_output="the product", agent=calculator)
    write = Task(name="write", description="Report the product in one sentence.", expected_output="one sentence",
                 agent=writer, context=[compute], output_pydantic=Report)  # fmt: skip
    crew = Crew(name="arithmetic", agents=[calculator, writer], tasks=[compute, write], process=Process.sequential)
    output = asyncio.run(crew.kickoff_async()) if task["kickoff"] == "async" else crew.kickoff()
    return 1.0 if output.pydantic == Report(sentence=report(task["a"] * task["b"])) else 0.0
