"""Agent Lightning's RAG agent (``examples/rag/rag_agent.py``), ported to agl-stream.

``RAGAgent`` is an ``agl.LitAgent``: each rollout connects to the retriever MCP server over HTTP+SSE
(``wiki_retriever_mcp/wiki_retriever_mcp.py``, tool ``retrieve``), builds an OpenAI Agents SDK ``Agent``
named ``Assistant`` with the server's tools and the policy as its model, runs it on the question and
returns the reward: the F1 of the ``<answer>...</answer>`` in its final output against the ground truth
(``utils.compute_scores``). Validation runs the same rollout.

The structure, names and calls are upstream's; what changed (README.md, "What changed"): ``import
agl_stream as agl``; the model is ``OpenAIChatCompletionsModel`` on an ``AsyncOpenAI`` client (upstream:
``LitellmModel("hosted_vllm/" + model)``, which openai-agents 0.0.7 does not have); ``MCPServerSse`` comes
from ``agents_mcp`` (the SDK's class, handing it mcp 2's tools under mcp 1's field name); the server URL
is a constructor argument (default upstream's); the policy's ``max_tokens`` reaches the model settings and
survives validation's resources; and the SDK's export of its traces to api.openai.com is switched off.
Nothing here mentions tracing: the runner records the agent (``agent.name`` = ``Assistant``), each LLM
call with its token ids (one triplet each) and each ``retrieve`` call (a ``retrieve.tool`` span).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, cast

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_trace_processors
from agents.model_settings import ModelSettings
from agents_mcp import MCPServerSse
from openai import AsyncOpenAI
from utils import compute_scores

import agl_stream as agl

agl.setup_logging()
logger = logging.getLogger(__name__)

# The SDK's default trace processor sends every run to api.openai.com when OPENAI_API_KEY is set. Drop
# it when this module loads: a runner loads its agent before its tracer starts, and the tracer then
# registers OpenInference's processor, which turns the SDK's agent and tool spans into the runner's.
set_trace_processors([])

#: upstream's address of the retriever (``wiki_retriever_mcp.py`` serves SSE there by default)
MCP_SERVER_URL = "http://127.0.0.1:8099/sse"

agent_prompt = """You answer questions with the help of a search tool over an encyclopedia. Base the answer only on the passages the tool returns, and check it against their text.

After every search:
- Sum up what the passages say.
- Judge whether that is enough to answer.
  - If it is: give the answer inside <answer></answer>, as short as it can be: one word or a few.
  - If it is not: say what to search for next; the tool returns the passages that match best.
- Say why you chose that step.

Search again as often as needed. Put your final, short answer between <answer> and </answer>."""


class RAGAgent(agl.LitAgent[Dict[str, Any]]):
    """Answers a question with the MCP retriever; the reward is the answer's F1."""

    def __init__(self, trained_agents: str | None = None, mcp_server_url: str = MCP_SERVER_URL) -> None:
        super().__init__(trained_agents=trained_agents)
        self.mcp_server_url = mcp_server_url

    async def training_rollout_async(
        self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout
    ) -> float | None:
        llm = cast(agl.LLM, resources["main_llm"])
        logger.info("rollout with model %s at %s", llm.model, llm.endpoint)

        async with MCPServerSse(
            name="wiki_retriever_mcp",
            params={"url": self.mcp_server_url},
        ) as server:
            agent = Agent(
                # upstream: LitellmModel(model="hosted_vllm/" + llm.model, base_url=llm.endpoint)
                model=OpenAIChatCompletionsModel(
                    model=llm.model,
                    openai_client=AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "token-abc123"),
                ),
                model_settings=ModelSettings(
                    # upstream's 4096 unless the trainer caps it (the CPU configurations do)
                    max_tokens=llm.sampling_parameters.get("max_tokens", 4096),
                    temperature=0.7,
                ),
                name="Assistant",
                instructions=agent_prompt,
                mcp_servers=[server],
            )
            result = await Runner.run(agent, task["question"])
            answer = result.final_output

            reward = compute_scores(answer, str(task["answer"]))

            logger.info(
                "question: %s answer: %s ground_truth: %s reward: %s", task["question"], answer, task["answer"], reward
            )
            return reward

    async def validation_rollout_async(
        self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout
    ) -> float | None:
        """The training rollout at temperature 0.7 (the policy's other sampling parameters kept)."""
        llm = cast(agl.LLM, resources["main_llm"])

        val_resources: agl.NamedResources = {
            "main_llm": agl.LLM(
                endpoint=llm.endpoint,
                model=llm.model,
                api_key=llm.api_key,
                sampling_parameters={**llm.sampling_parameters, "temperature": 0.7},
            )
        }

        return await self.training_rollout_async(task, val_resources, rollout)


if __name__ == "__main__":
    trainer = agl.Trainer(n_workers=2)

    print("RAGAgent is defined. Train it with train_rag.py, or try it with rag_run_dev.py.")
