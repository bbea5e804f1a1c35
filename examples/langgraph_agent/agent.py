"""A LangGraph agent trained with agl-stream, traced with no code change.

Two nodes: ``planner`` drafts an approach, ``writer`` streams the final answer. The LangChain and
OpenAI instrumentations (OpenInference, activated automatically when ``agl-stream[langchain]`` is
installed) record both nodes and their LLM calls; each node span carries ``agent.name``, so
``agent_match="writer"`` trains the writer's calls only (upstream's Spider example does the same with
its ``write_query`` node).
"""

from __future__ import annotations

from typing import Any, TypedDict

from agl_stream.litagent import rollout
from agl_stream.types import LLM


class State(TypedDict, total=False):
    question: str
    plan: str
    answer: str


def build_graph(llm: LLM) -> Any:
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    chat = ChatOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", model=llm.model, max_tokens=64,
                      **llm.sampling_parameters)  # fmt: skip

    def planner(state: State) -> State:
        reply = chat.invoke(f"Plan how to answer, in one line: {state['question']}")
        return {"plan": str(reply.content)}

    def writer(state: State) -> State:
        prompt = f"Question: {state['question']}\nPlan: {state['plan']}\nAnswer with the result only."
        return {"answer": "".join(str(chunk.content) for chunk in chat.stream(prompt))}

    graph = StateGraph(State)
    graph.add_node("planner", planner)
    graph.add_node("writer", writer)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "writer")
    graph.add_edge("writer", END)
    return graph.compile()


@rollout
def langgraph_agent(task: dict[str, Any], llm: LLM) -> float:
    state = build_graph(llm).invoke({"question": task["question"]})
    return 1.0 if task["answer"] in state["answer"] else 0.0
