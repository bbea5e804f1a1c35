"""An ``agent_func(resource, task) -> float`` for the training service (``agl_stream.Client``).

It asks the served policy the task's question and is rewarded 1.0 when the reply holds the
``ground_truth``. It runs on the client's machine, in the runner processes ``Client.train`` and
``Client.evaluate`` start; ``resource.model_api`` is the server's inference endpoint.
"""

from __future__ import annotations

from openai import OpenAI

from agl_stream.training_service import Resource, Task


def agent_func(resource: Resource, task: Task) -> float:
    client = OpenAI(base_url=resource.model_api, api_key="unused")
    reply = client.chat.completions.create(
        model=resource.model_name,
        messages=[{"role": "system", "content": "Answer with the number only."}, {"role": "user", "content": task.question}],
        max_tokens=16,
    )
    answer = reply.choices[0].message.content or ""
    return 1.0 if task.ground_truth is not None and str(task.ground_truth) in answer else 0.0
