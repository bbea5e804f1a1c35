"""Agent Lightning's Spider SQL agent, ported to agl-stream (see docs/porting-from-agent-lightning.md).

Upstream builds the agent with LangGraph: write a query, execute it, check it, rewrite it while the
check finds mistakes and turns remain. This port keeps that structure, the class names and the
``LitSQLAgent`` constructor, but runs the loop in plain Python with the OpenAI client (no LangChain
dependency). Each step runs inside an OpenTelemetry span carrying ``gen_ai.agent.name`` (the step's
name), which is what ``TracerTraceToTriplet(agent_match=...)`` selects on, as LangGraph's node spans
do upstream. The prompts are this repository's own wording.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sqlite3
import tempfile
import time
from collections import Counter
from typing import Any, Literal, Optional, TypedDict

from openai import OpenAI
from opentelemetry import trace

import agl_stream as agl

logger = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

END = "__end__"

WRITE_QUERY_PROMPT = (
    "You write {dialect} queries against this database.\n\n## Tables ##\n{table_info}\n\n"
    "Use only the tables and columns shown. Answer with one query in a ```{dialect} block.",
    "Question: {input}",
)
CHECK_QUERY_PROMPT = (
    "You review {dialect} queries. Look for wrong columns or joins, NULL handling, UNION vs UNION ALL, "
    "range bounds, type mismatches, quoting, and results that cannot be right.\n\n## Tables ##\n{table_info}\n\n"
    "List the mistakes you find, then end with exactly THE QUERY IS CORRECT. or THE QUERY IS INCORRECT. "
    "Do not write a corrected query.",
    "Question: {input}\n\nQuery:\n```{dialect}\n{query}\n```\n\nResult:\n```\n{execution}\n```",
)
REWRITE_QUERY_PROMPT = (
    "You fix {dialect} queries using a reviewer's feedback.\n\n## Tables ##\n{table_info}\n\n"
    "Use only the tables and columns shown. Answer with the fixed query in a ```{dialect} block.",
    "Question: {input}\n\nPrevious query:\n```{dialect}\n{query}\n```\n\nIts result:\n```\n{execution}\n```\n\n"
    "Feedback:\n{feedback}",
)


class State(TypedDict, total=False):
    question: str
    query: str
    execution: str
    answer: str
    feedback: str
    num_turns: int
    messages: list[dict[str, str]]


def _render(prompt: tuple[str, str], **values: Any) -> list[dict[str, str]]:
    system, user = prompt
    return [{"role": "system", "content": system.format(**values)}, {"role": "user", "content": user.format(**values)}]


class SQLAgent:
    def __init__(
        self,
        db: str,
        max_turns: int = 5,
        debug: bool = False,
        db_schema: str | None = None,
        endpoint: str | None = None,
        verl_replacement: dict | None = None,
        table_info_truncate: int = 2048,
        execution_truncate: int = 2048,
    ):
        self.db_path = db.removeprefix("sqlite:///")
        self.dialect = "sqlite"
        self.db_schema = db_schema
        self.debug = debug
        self.max_turns = max_turns
        self.table_info_truncate = table_info_truncate
        self.execution_truncate = execution_truncate
        replacement = verl_replacement or {}
        self.model_name = replacement.get("model") or os.environ.get("MODEL", "gpt-4.1-mini")
        self.temperature = float(replacement.get("temperature", 0.0))
        self.max_tokens = int(replacement.get("max_tokens", 2048))
        self.client = OpenAI(
            base_url=endpoint or os.environ.get("OPENAI_API_BASE"),
            api_key=os.environ.get("OPENAI_API_KEY", "dummy"),
            max_retries=0 if verl_replacement is not None else 1,
        )

    def get_table_info(self) -> str:
        """The tables' CREATE statements and a few rows of each, truncated."""
        try:
            with sqlite3.connect(self.db_path) as con:
                tables = con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
                parts = []
                for name, ddl in tables:
                    rows = con.execute(f'SELECT * FROM "{name}" LIMIT 3').fetchall()
                    parts.append(f"{ddl}\n/* sample rows: {rows} */")
            info = "\n\n".join(parts)
        except sqlite3.Error as exc:
            logger.error("could not read the schema: %s", exc)
            info = self.db_schema or "No schema available."
        if len(info) > self.table_info_truncate:
            info = info[: self.table_info_truncate] + "\n... (truncated)"
        return info

    def invoke_prompt(self, messages: list[dict[str, str]]) -> str:
        try:
            reply = self.client.chat.completions.create(
                model=self.model_name, messages=messages, temperature=self.temperature, max_tokens=self.max_tokens  # type: ignore[arg-type]
            )
        except Exception as exc:  # upstream falls back to asking for any query, so the trajectory goes on
            logger.error("LLM call failed: %s", exc)
            reply = self.client.chat.completions.create(
                model=self.model_name, messages=[{"role": "user", "content": "Write any SQL query as an example."}],
                max_tokens=self.max_tokens,
            )  # fmt: skip
        return reply.choices[0].message.content or ""

    def truncate_execuion(self, execution: str) -> str:
        if len(execution) > self.execution_truncate:
            return execution[: self.execution_truncate] + "\n... (truncated)"
        return execution

    def parse_query(self, content: str) -> str | None:
        blocks = re.findall(r"```\w*\n(.*?)\n```", content, re.DOTALL)
        return blocks[-1].strip() if blocks else None

    def write_query(self, state: State) -> State:
        messages = _render(WRITE_QUERY_PROMPT, dialect=self.dialect, input=state["question"], table_info=self.get_table_info())
        content = self.invoke_prompt(messages)
        return {**state, "query": self.parse_query(content) or content, "num_turns": 1,
                "messages": [*messages, {"role": "assistant", "content": content}]}  # fmt: skip

    def execute_query(self, state: State) -> State:
        try:
            with sqlite3.connect(self.db_path) as con:
                result = str(con.execute(state["query"]).fetchall())
        except Exception as exc:  # the checker sees the error text, as with LangChain's SQL tool
            result = f"Error: {exc}"
        return {**state, "execution": result}

    def check_query(self, state: State) -> State:
        messages = _render(CHECK_QUERY_PROMPT, dialect=self.dialect, input=state["question"], query=state["query"],
                           execution=self.truncate_execuion(state["execution"]), table_info=self.get_table_info())  # fmt: skip
        content = self.invoke_prompt(messages)
        return {**state, "feedback": content, "messages": [*state.get("messages", []), *messages,
                                                           {"role": "assistant", "content": content}]}  # fmt: skip

    def rewrite_query(self, state: State) -> State:
        messages = _render(REWRITE_QUERY_PROMPT, dialect=self.dialect, input=state["question"], query=state["query"],
                           execution=self.truncate_execuion(state["execution"]), feedback=state["feedback"],
                           table_info=self.get_table_info())  # fmt: skip
        content = self.invoke_prompt(messages)
        return {**state, "query": self.parse_query(content) or state["query"], "num_turns": state.get("num_turns", 0) + 1,
                "messages": [*messages, {"role": "assistant", "content": content}]}  # fmt: skip

    def should_continue(self, state: State) -> Literal["__end__", "rewrite_query"]:
        feedback = state.get("feedback", "")
        correct, incorrect = feedback.rfind("THE QUERY IS CORRECT"), feedback.rfind("THE QUERY IS INCORRECT")
        if correct > incorrect:
            return END
        if state.get("num_turns", 0) >= self.max_turns:
            return END
        return "rewrite_query"

    def graph(self) -> "SQLGraph":
        return SQLGraph(self)


class SQLGraph:
    """write -> execute -> check -> (end | rewrite -> execute -> check ...), each step in its agent span."""

    def __init__(self, agent: SQLAgent) -> None:
        self.agent = agent

    def _step(self, name: str, state: State) -> State:
        with tracer.start_as_current_span(name, attributes={"gen_ai.agent.name": name}):
            return getattr(self.agent, name)(state)

    def invoke(self, state: State) -> State:
        state = self._step("write_query", state)
        while True:
            state = self._step("execute_query", state)
            state = self._step("check_query", state)
            if self.agent.should_continue(state) == END:
                return state
            state = self._step("rewrite_query", state)


def evaluate_query(query: str, ground_truth: str, database: str, raise_on_error: bool = True) -> float:
    """1.0 when the query returns the same rows as the ground truth (as a multiset), else 0.0."""
    try:
        database = os.path.abspath(database)
        if not os.path.exists(database):
            raise FileNotFoundError(f"Database file {database} does not exist.")
        with sqlite3.connect(database) as con:
            expected = Counter(con.execute(ground_truth).fetchall())
            got = Counter(con.execute(query).fetchall())
        return 1.0 if got == expected else 0.0
    except Exception as exc:
        if raise_on_error:
            raise
        logger.info("query could not be evaluated: %s", exc)
        return 0.0


class LitSQLAgent(agl.LitAgent):
    def __init__(
        self,
        trained_agents: Optional[str] = r"write",
        val_temperature: Optional[float] = None,
        max_turns: int = 3,
        table_info_truncate: int = 2048,
        execution_truncate: int = 2048,
    ) -> None:
        super().__init__(trained_agents=trained_agents)
        self.val_temperature = val_temperature
        self.spider_dir = os.environ.get("VERL_SPIDER_DATA_DIR", "data")
        self.max_turns = max_turns
        self.table_info_truncate = table_info_truncate
        self.execution_truncate = execution_truncate

    def _execute_rollout(self, sample: dict[str, Any], *, resources: agl.NamedResources, rollout_id: str,
                         is_training: bool) -> float | None:  # fmt: skip
        question = sample["question"]
        start_time = time.time()
        llm: agl.LLM = resources["main_llm"]  # type: ignore[assignment]
        folder = "database" if is_training else "test_database"
        original_db_path = os.path.join(self.spider_dir, folder, sample["db_id"], sample["db_id"] + ".sqlite")
        ground_truth = sample["query"]
        if not os.path.exists(original_db_path):
            logger.error("Database %s does not exist. Skipping.", original_db_path)
            return None
        schema_path = os.path.join(os.path.dirname(original_db_path), "schema.sql")
        schema = open(schema_path).read() if os.path.exists(schema_path) else "No schema available."

        with tempfile.TemporaryDirectory() as temp_dir:
            db_path = os.path.join(temp_dir, os.path.basename(original_db_path))
            shutil.copyfile(original_db_path, db_path)
            logger.info("[Rollout %s] Question: %s", rollout_id, question)
            temperature = llm.sampling_parameters.get("temperature", 0.0)
            if not is_training and self.val_temperature is not None:
                temperature = self.val_temperature
            agent = SQLAgent(
                "sqlite:///" + db_path,
                max_turns=self.max_turns,
                table_info_truncate=self.table_info_truncate,
                execution_truncate=self.execution_truncate,
                db_schema=schema,
                endpoint=llm.endpoint,
                verl_replacement={"model": llm.model, **llm.sampling_parameters, "temperature": temperature},
            ).graph()
            try:
                result = agent.invoke({"question": question})
            except Exception as exc:
                logger.exception("[Rollout %s] the agent failed: %s", rollout_id, exc)
                return None
            logger.info("[Rollout %s] Generated Query: %s", rollout_id, result["query"])

        with tempfile.TemporaryDirectory() as temp_dir:  # a fresh copy: the agent's queries may have written
            db_path = os.path.join(temp_dir, os.path.basename(original_db_path))
            shutil.copyfile(original_db_path, db_path)
            reward = evaluate_query(result["query"], ground_truth, db_path, raise_on_error=False)
        logger.info("[Rollout %s] Reward: %s (%.2f s)", rollout_id, reward, time.time() - start_time)
        return reward

    def training_rollout(self, task: Any, resources: agl.NamedResources, rollout: agl.Rollout) -> Any:
        return self._execute_rollout(task, resources=resources, rollout_id=rollout.rollout_id, is_training=True)

    def validation_rollout(self, task: Any, resources: agl.NamedResources, rollout: agl.Rollout) -> Any:
        return self._execute_rollout(task, resources=resources, rollout_id=rollout.rollout_id, is_training=False)
