"""A third-party command-line agent from PyPI, trained unchanged: Simon Willison's ``llm`` (0.36).

Why ``llm``: it is a maintained, widely used CLI (``pip install llm``) that talks to any OpenAI-compatible server
through ``OPENAI_BASE_URL``, so the controller's scoped route reaches it with no plugin and no config file; it
streams by default (the proxy records streamed calls with their token ids); and its prompt is the task alone
(plus a system prompt), which fits SmolLM2's 2,048-token context, where coding agents such as aider or
OpenHands open with system prompts of several thousand tokens. It lives in a side venv (``make cli-agent``):
it needs openai 3, and agl-stream pins openai 2.

Per attempt the controller runs, with no shell::

    .agl/llm-venv/bin/llm --no-log -m gpt-4o-mini -s "<system prompt>" "{input.question}"

(``--template-args`` fills the question in), then ``check.py`` grades the answer it printed into the reward.
``LLM_USER_PATH`` points at ``.agl/llm-home``, which ``make cli-agent`` sets up once: every ``llm`` process
migrates its log database at start (``--no-log`` too), and concurrent first runs race on it.
``llm`` knows the model as ``gpt-4o-mini``; the proxy serves that name from the CPU engine.
"""
