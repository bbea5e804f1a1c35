"""A text-to-SQL agent: write a query, execute it, repair it once on error; reward = execution match.

Multi-turn like upstream's SQL agent (write -> check -> rewrite): each LLM call is a triplet, and the
final reward is assigned to the trajectory.
"""

from __future__ import annotations

from typing import Any

from openai import OpenAI

from agl_stream.litagent import rollout
from agl_stream.types import LLM
from examples.text_to_sql.build_db import SCHEMA
from examples.text_to_sql.evaluate import execution_match, extract_sql, run

PROMPT = "SQLite schema:\n{schema}\nWrite one SQLite query that answers: {question}\nReply with the query in a ```sql block."


@rollout
def sql_agent(task: dict[str, Any], llm: LLM) -> float:
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=2, timeout=120)
    messages: list[dict[str, str]] = [{"role": "user", "content": PROMPT.format(schema=SCHEMA.strip(), question=task["question"])}]
    sql = ""
    for _turn in range(2):
        reply = client.chat.completions.create(
            model=llm.model, messages=messages, max_tokens=96, temperature=0.7, **llm.sampling_parameters  # type: ignore[arg-type]
        )
        text = reply.choices[0].message.content or ""
        sql = extract_sql(text)
        _rows, error = run(sql) if sql else (None, "no SQL found in the reply")
        if error is None:
            break
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"That failed: {error}. Fix it."}]
    return execution_match(sql, task["gold_sql"])
