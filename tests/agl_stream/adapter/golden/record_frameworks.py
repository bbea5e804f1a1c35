"""Upstream's answer for the framework golden cases: their recorded LLM calls made again through Agent Lightning
0.3.0's own runner and tracers (run by the python of ``.agl/upstream-frameworks-venv``).

Not imported by agl-stream or its tests: ``generate_frameworks.py`` runs it once per recording process (each
tracer installs its own global OpenTelemetry provider)::

    <upstream-frameworks-venv>/bin/python record_frameworks.py --process agentops --exchanges ex.json --out part.json

Every case is one rollout run by upstream's ``LitAgentRunner.step`` whose agent makes the case's recorded calls
against a :class:`~replay_vllm.ReplayVllm` answering with the recorded responses, and returns the reward the
framework agent returned; spans are read back from upstream's ``InMemoryLightningStore``.

* ``agentops``: ``AgentOpsTracer``, the tracer of upstream's OpenAI-client examples. Chat calls are made with
  upstream's openai client (the exact recorded request: the server refuses any other) or, for litellm cases, with
  upstream's pinned litellm and the case's provider; derived with ``TracerTraceToTriplet()``. Anthropic calls are
  made with the Anthropic SDK through an ``LLMProxy`` (the only Messages endpoint upstream has), and derived with
  ``TracerTraceToTriplet`` matching AgentOps' ``anthropic.messages.create`` spans (the default match, the OpenAI
  span name, finds none of them; the in-process proxy's own openai calls would pollute it, so it is not kept).
* ``proxy``: ``OtelTracer`` with upstream's ``LLMProxy`` (thread mode) in front of the replay server, the same
  client calls sent to the proxy, derived with ``LlmProxyTraceToTriplet``: upstream's path for SDKs it does not
  instrument, and the one that keeps token ids of streamed calls (it makes them plain calls to the engine).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
os.environ.setdefault("AGENTOPS_LOGGING_TO_FILE", "False")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_vllm import ReplayVllm  # noqa: E402

import agentlightning as agl  # noqa: E402
from agentlightning.adapter.triplet import LlmProxyTraceToTriplet, TracerTraceToTriplet  # noqa: E402
from agentlightning.store.memory import InMemoryLightningStore  # noqa: E402

MODEL = "policy"
ANTHROPIC_LLM_SPAN = r"anthropic\.messages\.create"
PROXY_EXPORT_SECONDS = 1.0  # the proxy exports its spans after answering
#: what AgentOps' openai wrapper adds to streamed requests (``stream_options.include_usage``)
AGENTOPS_ADDS = ("stream_options",)


def _json(value: Any) -> Any:
    """A JSON-safe copy (pydantic models dumped)."""

    def dump(v: Any) -> Any:
        return v.model_dump(mode="json") if hasattr(v, "model_dump") else str(v)

    return json.loads(json.dumps(value, default=dump))


def _openai_kwargs(request: dict[str, Any], create: Callable[..., Any]) -> dict[str, Any]:
    """The recorded request as ``chat.completions.create`` arguments: what it names, the rest as ``extra_body``."""
    known = set(inspect.signature(create).parameters)
    kwargs = {k: v for k, v in request.items() if k in known}
    extra = {k: v for k, v in request.items() if k not in known}
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def _drain(reply: Any, streamed: bool) -> None:
    if streamed:
        for _ in reply:
            pass


def replay_chat(case: dict[str, Any], endpoint: str) -> None:
    """The case's chat calls, in order, with upstream's openai client or its litellm."""
    for exchange in case["exchanges"]:
        request = dict(exchange["request"])
        if case["client"] == "litellm":
            import litellm

            model = request.pop("model")
            extra = {k: request.pop(k) for k in ("return_token_ids",) if k in request}
            reply = litellm.completion(model=f"{case['provider']}/{model}", api_base=endpoint, api_key="golden",
                                       extra_body=extra or None, **request)  # fmt: skip
        else:
            import openai

            create = openai.OpenAI(base_url=endpoint, api_key="golden", max_retries=0).chat.completions.create
            reply = create(**_openai_kwargs(request, create))
        _drain(reply, bool(request.get("stream")))


def replay_messages(case: dict[str, Any], endpoint: str) -> None:
    """The case's Messages calls, in order, with the Anthropic SDK (``endpoint``: upstream's proxy)."""
    import anthropic

    client = anthropic.Anthropic(base_url=endpoint.removesuffix("/v1"), api_key="golden", max_retries=0)
    for request in case["messages_requests"]:
        _drain(client.messages.create(**request), bool(request.get("stream")))


def _is_health_probe(request: dict[str, Any]) -> bool:
    """litellm's health checks (upstream's LLMProxy probes its backend when it starts) ask for no token ids;
    every recorded call does (``generate_frameworks.py`` checks), and so does every replayed one."""
    return "return_token_ids" not in request and "return_token_ids" not in (request.get("extra_body") or {})


def _triplets(adapter: Any, spans: list[Any]) -> list[dict[str, Any]]:
    return [_json(t.model_dump()) for t in adapter.adapt(spans)]


async def record(process: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    store = InMemoryLightningStore(thread_safe=True)
    tracer: Any = agl.AgentOpsTracer() if process == "agentops" else agl.OtelTracer()
    runner = agl.LitAgentRunner(tracer)
    by_name = {case["name"]: case for case in cases}

    @agl.rollout
    def replay(task: dict[str, Any], llm: agl.LLM) -> Any:
        case = by_name[task["case"]]
        if case["api"] == "messages":
            replay_messages(case, llm.endpoint)
        else:
            replay_chat(case, llm.endpoint)
        return case["reward"]

    proxy: Any = None
    answers: list[dict[str, Any]] = []
    runner.init(replay)
    runner.init_worker(0, store)
    try:
        for case in cases:
            # the openai client's replays must send exactly the recorded requests; litellm and upstream's proxy
            # build their own (other versions, other translations) and get the recorded answers in order
            strict = case["api"] == "chat" and case["client"] == "openai" and process == "agentops"
            engine = ReplayVllm(case["exchanges"], strict=strict, tolerated=AGENTOPS_ADDS, is_probe=_is_health_probe)
            with engine:
                through_proxy = process == "proxy" or case["api"] == "messages"
                if through_proxy:
                    backend = {"model": f"hosted_vllm/{MODEL}", "api_base": engine.base_url}
                    models = [{"model_name": MODEL, "litellm_params": backend}]
                    if proxy is None:
                        proxy = agl.LLMProxy(model_list=models, store=store, launch_mode="thread", host="127.0.0.1")
                        await proxy.start()
                    else:
                        proxy.update_model_list(models)
                        await proxy.restart()
                llm = proxy.as_resource(model=MODEL) if through_proxy else agl.LLM(endpoint=engine.base_url,
                                                                                    model=MODEL)  # fmt: skip
                try:
                    rollout = await runner.step({"case": case["name"]}, resources={"llm": llm})
                except Exception as exc:  # upstream's stack failing the framework's call is its answer: kept
                    if engine.state()["refused"]:  # the replay went wrong, not upstream
                        refused = engine.state()["refused"]
                        raise RuntimeError(f"{case['name']}: the replay server refused {refused}") from exc
                    error = re.sub(r" at 0x[0-9a-f]+", "", f"{type(exc).__name__}: {exc}")
                    received = engine.state()["received"]
                    answers.append({"name": case["name"], "error": error, "engine_requests": received})
                    print(f"replayed {case['name']} ({process}): upstream raised {error[:300]}", file=sys.stderr)
                    continue
                if through_proxy:
                    await asyncio.sleep(PROXY_EXPORT_SECONDS)
                state = engine.state()
            if rollout.status != "succeeded" or state["refused"]:
                raise RuntimeError(f"{case['name']}: upstream's replay {rollout.status}; refused: {state['refused']}")
            if len(state["received"]) != len(case["exchanges"]):
                raise RuntimeError(f"{case['name']}: {len(state['received'])} calls reached the engine, "
                                   f"{len(case['exchanges'])} were recorded")  # fmt: skip
            spans = list(await store.query_spans(rollout.rollout_id, attempt_id="latest"))
            answer: dict[str, Any] = {
                "name": case["name"],
                "span_names": [s.name for s in spans],
                "engine_requests": state["received"],
            }
            if process == "proxy":
                answer["triplets"] = _triplets(LlmProxyTraceToTriplet(), spans)
            elif case["api"] == "messages":
                answer["triplets"] = _triplets(TracerTraceToTriplet(llm_call_match=ANTHROPIC_LLM_SPAN), spans)
                answer["llm_call_match"] = ANTHROPIC_LLM_SPAN
            else:
                answer["triplets"] = _triplets(TracerTraceToTriplet(), spans)
                answer["llm_call_match"] = TracerTraceToTriplet().llm_call_match
            answers.append(answer)
            print(f"replayed {case['name']} ({process}): {len(spans)} spans, {len(answer['triplets'])} triplets",
                  file=sys.stderr)  # fmt: skip
    finally:
        runner.teardown_worker(0)
        if proxy is not None:
            await proxy.stop()
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--process", required=True, choices=("agentops", "proxy"))
    parser.add_argument("--exchanges", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    try:
        answers = asyncio.run(record(args.process, json.loads(args.exchanges.read_text())))
        args.out.write_text(json.dumps(answers))
    except BaseException:  # reported, and the exit status says it failed
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    # AgentOps and LiteLLM leave non-daemon threads behind (they would hold the process): leave now.
    os._exit(0)


if __name__ == "__main__":
    main()
