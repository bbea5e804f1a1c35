"""Record which ``sequence_id`` upstream Agent Lightning 0.3.0 stores for OTLP deliveries (side venv's python).

Not imported by agl-stream or its tests: ``generate_sequence_ids.py`` runs it with the python of the
side venv (``agentlightning==0.3.0``); ``test_upstream_sequence_ids.py`` runs its ``check`` step::

    <side-venv>/bin/python record_sequence_ids.py live --process otel --out otel.json
    <side-venv>/bin/python record_sequence_ids.py live --process agentops --out agentops.json
    <side-venv>/bin/python record_sequence_ids.py derive --material otel.json agentops.json --out data.json
    <side-venv>/bin/python record_sequence_ids.py check --data sequence_ids.json

``live`` runs rollouts with upstream's ``LitAgentRunner`` and tracer (``OtelTracer`` or
``AgentOpsTracer``) against upstream's ``LightningStoreServer`` over an ``InMemoryLightningStore``:
the tracers see a store with ``otlp_traces`` and export natively over OTLP (no sequence ids on the
spans). The server records every ``/v1/traces`` body as it arrived, and the store's ``query_spans``
gives upstream's answer. ``derive`` builds the deliveries (see ``DELIVERIES``) from that material,
each sent to a fresh upstream server whose store numbers it; ``check`` sends the committed bodies
to fresh upstream servers again and compares the answers. Tracers need a process each (each
installs a global OpenTelemetry provider).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import gzip
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("AGENTOPS_LOGGING_TO_FILE", "False")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import requests  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from opentelemetry import trace as trace_api  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import Event, ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: E402
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags  # noqa: E402

import agentlightning as agl  # noqa: E402
import agentlightning.store.client_server as client_server  # noqa: E402
from agentlightning.semconv import LightningResourceAttributes  # noqa: E402
from agentlightning.store.client_server import LightningStoreClient, LightningStoreServer  # noqa: E402
from agentlightning.store.memory import InMemoryLightningStore  # noqa: E402
from agentlightning.types import Span  # noqa: E402

ROLLOUT_KEY = LightningResourceAttributes.ROLLOUT_ID.value
ATTEMPT_KEY = LightningResourceAttributes.ATTEMPT_ID.value
SEQUENCE_KEY = LightningResourceAttributes.SPAN_SEQUENCE_ID.value
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")

#: (corpus case from record.py, attempts) per tracer process; a second attempt is a retry of the rollout
LIVE: dict[str, list[tuple[str, int]]] = {
    "otel": [("otel_nested_agents", 1), ("otel_overlapping_calls", 2), ("otel_several_traces", 1)],
    "agentops": [("agentops_intermediate_then_final", 2), ("agentops_nested_agents", 1)],
}
#: where the replay puts each rollout's stored sequence id (cycled over the rollouts)
PLACEMENTS = ("span_attribute", "resource", "span_over_resource", "span_attribute_string", "every_other_span")
#: every delivery: source x encoding x requests
DELIVERIES = tuple(f"{s}/{e}/{n}" for s in ("native", "replay") for e in ("protobuf", "json") for n in ("many", "one"))

# ---------------------------------------------------------------------------------------------- capture

CAPTURED: list[dict[str, Any]] = []
_original_handler = client_server.handle_otlp_export


async def _capturing_handler(request: Any, *args: Any, **kwargs: Any) -> Any:
    """Upstream's own OTLP handler, after keeping the body exactly as it arrived."""
    CAPTURED.append({
        "content_type": request.headers.get("content-type", ""),
        "content_encoding": request.headers.get("content-encoding", ""),
        "body": await request.body(),
    })  # fmt: skip
    return await _original_handler(request, *args, **kwargs)


client_server.handle_otlp_export = _capturing_handler  # looked up per request by upstream's route


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Upstream:
    """Upstream's LightningStoreServer over a fresh InMemoryLightningStore, with its client."""

    async def __aenter__(self) -> "Upstream":
        CAPTURED.clear()
        self.store = InMemoryLightningStore(thread_safe=True)
        self.port = _free_port()
        self.server = LightningStoreServer(self.store, host="127.0.0.1", port=self.port)
        await self.server.start()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = LightningStoreClient(self.url)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        await self.server.stop()

    async def new_rollouts(self, attempts: dict[str, list[str]]) -> dict[str, str]:
        """Create a rollout per key with as many attempts; old id -> new id, rollouts and attempts alike."""
        mapping: dict[str, str] = {}
        for old_rollout, old_attempts in attempts.items():
            started = await self.client.start_rollout(input={"old": old_rollout})
            mapping[old_rollout] = started.rollout_id
            mapping[old_attempts[0]] = started.attempt.attempt_id
            for old_attempt in old_attempts[1:]:
                retry = await self.client.start_attempt(started.rollout_id)
                mapping[old_attempt] = retry.attempt.attempt_id
        return mapping

    def post(self, message: ExportTraceServiceRequest, gzipped: bool) -> None:
        """POST one export request the way an OTLP/HTTP exporter does."""
        body = message.SerializeToString()
        headers = {"Content-Type": PROTOBUF}
        if gzipped:
            body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        answer = requests.post(f"{self.url}/v1/traces", data=body, headers=headers, timeout=30)
        answer.raise_for_status()

    async def answer(self, rollout_ids: list[str]) -> list[list[Any]]:
        """What upstream stored: [rollout_id, attempt_id, span_id, sequence_id] in query_spans order.

        Complete once the exports returned: upstream's handler stores the spans before it answers."""
        rows: list[list[Any]] = []
        for rollout_id in rollout_ids:
            spans = await self.store.query_spans(rollout_id)
            rows += [[s.rollout_id, s.attempt_id, s.span_id, s.sequence_id] for s in spans]
        return rows


def _message(captured: dict[str, Any]) -> ExportTraceServiceRequest:
    body = captured["body"]
    if captured["content_encoding"].lower() == "gzip":
        body = gzip.decompress(body)
    if captured["content_type"].split(";")[0].strip() != PROTOBUF:
        raise RuntimeError(f"upstream received {captured['content_type']!r}")
    return ExportTraceServiceRequest.FromString(body)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ---------------------------------------------------------------------------------------------- live


def _flush() -> None:
    provider = trace_api.get_tracer_provider()
    if hasattr(provider, "force_flush"):
        provider.force_flush()


async def live(process: str) -> dict[str, Any]:
    """Rollouts run by upstream's runner and tracer against upstream's server; its bodies and answer."""
    from fake_vllm import FakeVllm
    from record import CASES, Ctx, _active_otel_tracer

    by_name = {c.name: c for c in CASES}
    tracer: Any = agl.AgentOpsTracer() if process == "agentops" else agl.OtelTracer()
    runner = agl.LitAgentRunner(tracer)

    @agl.rollout
    def dispatch(task: dict[str, Any], llm: agl.LLM) -> None:
        # The final reward is not returned: upstream's runner would add it through the store's REST API
        # (get_next_span_sequence_id + add_span), not over OTLP, and only OTLP is recorded here.
        by_name[task["case"]].agent(Ctx(llm, _active_otel_tracer(tracer)))

    rollouts: dict[str, list[str]] = {}
    async with Upstream() as up:
        runner.init(dispatch)
        runner.init_worker(0, up.client)
        try:
            with FakeVllm() as vllm:
                llm = agl.LLM(endpoint=vllm.base_url, model="m")
                for name, attempts in LIVE[process]:
                    rollout = await runner.step({"case": name}, resources={"llm": llm})
                    _flush()
                    first = await up.store.get_latest_attempt(rollout.rollout_id)
                    rollouts[rollout.rollout_id] = [first.attempt_id]
                    for _ in range(attempts - 1):
                        retry = await up.client.start_attempt(rollout.rollout_id)
                        await runner._step_impl(retry, raise_on_exception=True)  # upstream's runner, a retried attempt
                        _flush()
                        rollouts[rollout.rollout_id].append(retry.attempt.attempt_id)
                    print(f"recorded {process} {name}: {attempts} attempt(s)", file=sys.stderr)
        finally:
            runner.teardown_worker(0)
        answer = await up.answer(list(rollouts))
        spans = [s.model_dump(mode="json") for rid in rollouts for s in await up.store.query_spans(rid)]
        sent = sum(len(ss.spans) for c in CAPTURED for rs in _message(c).resource_spans for ss in rs.scope_spans)
        bodies = [{**c, "body": _b64(c["body"])} for c in CAPTURED]
    if not bodies or sent != len(answer):
        raise SystemExit(f"{process}: the tracers sent {sent} span(s), upstream stored {len(answer)}")
    return {"process": process, "rollouts": rollouts, "bodies": bodies, "answer": answer, "spans": spans}


# ---------------------------------------------------------------------------------------------- derive


def _rewrite(message: ExportTraceServiceRequest, mapping: dict[str, str]) -> ExportTraceServiceRequest:
    """The same request with rollout and attempt ids (resource and span attributes) mapped to new ones."""
    out = copy.deepcopy(message)

    def remap(attributes: Any) -> None:
        for kv in attributes:
            if kv.key in (ROLLOUT_KEY, ATTEMPT_KEY) and kv.value.string_value in mapping:
                kv.value.string_value = mapping[kv.value.string_value]

    for resource_spans in out.resource_spans:
        remap(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                remap(span.attributes)
    return out


def _merge(messages: list[ExportTraceServiceRequest]) -> ExportTraceServiceRequest:
    """One export request holding every request's resource spans, in order."""
    merged = ExportTraceServiceRequest()
    for message in messages:
        merged.resource_spans.extend(message.resource_spans)
    return merged


def otlp_json(message: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON: proto3 JSON with trace and span ids spelled as hex, as the OTLP spec asks."""

    def hexify(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: base64.b64decode(v).hex() if k in _ID_FIELDS else hexify(v) for k, v in node.items()}
        if isinstance(node, list):
            return [hexify(v) for v in node]
        return node

    return json.dumps(hexify(json_format.MessageToDict(message))).encode()


def from_otlp_json(body: bytes) -> ExportTraceServiceRequest:
    def unhexify(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_FIELDS else unhexify(v)
                    for k, v in node.items()}  # fmt: skip
        if isinstance(node, list):
            return [unhexify(v) for v in node]
        return node

    return json_format.ParseDict(unhexify(json.loads(body)), ExportTraceServiceRequest())


def _as_sent(captured: dict[str, Any], encoding: str) -> dict[str, Any]:
    """A body upstream received, in the delivery's encoding (JSON: the same request, same compression)."""
    if encoding == "protobuf":
        return {**captured, "body": _b64(captured["body"])}
    body = otlp_json(_message(captured))
    if captured["content_encoding"].lower() == "gzip":
        body = gzip.compress(body)
    return {"content_type": JSON, "content_encoding": captured["content_encoding"], "body": _b64(body)}


def _context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _ns(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else round(seconds * 1_000_000_000)


def replay_span(span: Span, rollout_id: str, attempt_id: str, placement: str, index: int) -> ReadableSpan:
    """A span upstream stored, handed back to an OTLP exporter with its ids where ``placement`` says."""
    resource = {k: v for k, v in span.resource.attributes.items() if not k.startswith("agentlightning.")}
    resource.update({ROLLOUT_KEY: rollout_id, ATTEMPT_KEY: attempt_id})
    attributes = {k: v for k, v in span.attributes.items() if k != SEQUENCE_KEY}
    if placement == "span_attribute" or (placement == "every_other_span" and index % 2 == 0):
        attributes[SEQUENCE_KEY] = span.sequence_id
    elif placement == "span_attribute_string":
        attributes[SEQUENCE_KEY] = str(span.sequence_id)  # "a decimal string", as upstream's exporter documents
    elif placement == "resource":
        resource[SEQUENCE_KEY] = span.sequence_id
    elif placement == "span_over_resource":
        attributes[SEQUENCE_KEY] = span.sequence_id
        resource[SEQUENCE_KEY] = span.sequence_id + 1000  # the span's own attribute must win
    return ReadableSpan(
        name=span.name,
        context=_context(span.trace_id, span.span_id),
        parent=_context(span.trace_id, span.parent_id) if span.parent_id else None,
        resource=Resource(resource),
        attributes=attributes,
        events=[Event(e.name, e.attributes, _ns(e.timestamp)) for e in span.events],
        kind=SpanKind.INTERNAL,
        status=Status(StatusCode[span.status.status_code.upper()], span.status.description),
        start_time=_ns(span.start_time),
        end_time=_ns(span.end_time),
    )


def _round_robin(groups: list[list[Any]]) -> list[Any]:
    out: list[Any] = []
    for i in range(max(map(len, groups))):
        out += [g[i] for g in groups if i < len(g)]
    return out


async def derive_native(materials: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """Upstream tracers' own requests (no sequence ids) to a fresh upstream store, as many or as one."""
    _source, encoding, requests_ = name.split("/")
    attempts = {rid: aids for m in materials for rid, aids in m["rollouts"].items()}
    captured = [{**b, "body": base64.b64decode(b["body"])} for m in materials for b in m["bodies"]]
    async with Upstream() as up:
        mapping = await up.new_rollouts(attempts)
        messages = [_rewrite(_message(c), mapping) for c in captured]
        if requests_ == "many":
            for message, original in zip(messages, captured):
                up.post(message, gzipped=original["content_encoding"].lower() == "gzip")
        else:
            up.post(_merge(messages), gzipped=True)
        expected = await up.answer([mapping[rid] for rid in attempts])
        bodies = [_as_sent(c, encoding) for c in CAPTURED]
    live_answer = [row for m in materials for row in m["answer"]]
    if requests_ == "many" and expected != [[mapping[r], mapping[a], s, q] for r, a, s, q in live_answer]:
        raise SystemExit(f"{name}: a fresh upstream store numbered the live requests differently than the live store")
    if name == "native/protobuf/many":  # the very bytes upstream's exporters sent, and what the live store kept
        bodies, expected = [b for m in materials for b in m["bodies"]], live_answer
    return {"name": name, "bodies": bodies, "expected": expected}


async def derive_replay(materials: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The spans upstream stored, re-exported with their sequence ids by the stock OTLP exporter
    (upstream's LightningStoreOTLPExporter minus its resource merge) to a fresh upstream store."""
    _source, encoding, requests_ = name.split("/")
    attempts = {rid: aids for m in materials for rid, aids in m["rollouts"].items()}
    stored = [Span.model_validate(s) for m in materials for s in m["spans"]]
    async with Upstream() as up:
        mapping = await up.new_rollouts(attempts)
        groups: list[list[ReadableSpan]] = []
        placements: dict[str, str] = {}
        for k, rollout_id in enumerate(attempts):
            placement = PLACEMENTS[k % len(PLACEMENTS)]
            placements[mapping[rollout_id]] = placement
            mine = [s for s in stored if s.rollout_id == rollout_id]
            groups.append([replay_span(s, mapping[s.rollout_id], mapping[s.attempt_id], placement, i)
                           for i, s in enumerate(mine)])  # fmt: skip
        order = _round_robin(groups)
        exporter = OTLPSpanExporter(endpoint=f"{up.url}/v1/traces")
        batches = [[s] for s in order] if requests_ == "many" else [order]
        for batch in batches:
            if exporter.export(batch) is not SpanExportResult.SUCCESS:
                raise SystemExit(f"{name}: upstream refused an export")
        expected = await up.answer([mapping[rid] for rid in attempts])
        captured = list(CAPTURED)
    if requests_ == "one":  # one request, gzipped, as the exporter sends with compression on
        captured = [{**c, "content_encoding": "gzip", "body": gzip.compress(c["body"])} for c in captured]
    bodies = [_as_sent(c, encoding) for c in captured]
    return {"name": name, "placements": placements, "bodies": bodies, "expected": expected}


async def derive(materials: list[dict[str, Any]]) -> dict[str, Any]:
    out = []
    for name in DELIVERIES:
        delivery = await (derive_native if name.startswith("native/") else derive_replay)(materials, name)
        print(f"derived {name}: {len(delivery['bodies'])} request(s), {len(delivery['expected'])} spans",
              file=sys.stderr)  # fmt: skip
        out.append(delivery)
    return {"deliveries": out}


# ---------------------------------------------------------------------------------------------- check


async def check(data: dict[str, Any]) -> list[str]:
    """Send every committed delivery to fresh upstream servers; the differences from the committed answer."""
    problems: list[str] = []
    for delivery in data["deliveries"]:
        attempts: dict[str, list[str]] = {}
        for rollout_id, attempt_id, _span, _seq in delivery["expected"]:
            if attempt_id not in attempts.setdefault(rollout_id, []):
                attempts[rollout_id].append(attempt_id)
        async with Upstream() as up:
            mapping = await up.new_rollouts(attempts)
            back = {new: old for old, new in mapping.items()}
            for sent in delivery["bodies"]:
                body = base64.b64decode(sent["body"])
                gzipped = sent["content_encoding"].lower() == "gzip"
                if gzipped:
                    body = gzip.decompress(body)
                if sent["content_type"] == PROTOBUF:
                    message = ExportTraceServiceRequest.FromString(body)
                else:
                    message = from_otlp_json(body)
                up.post(_rewrite(message, mapping), gzipped=gzipped)
            got = [[back[r], back[a], s, q] for r, a, s, q in await up.answer([mapping[r] for r in attempts])]
        if got != delivery["expected"]:
            problems.append(f"{delivery['name']}: upstream now stores {got}, committed {delivery['expected']}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p_live = sub.add_parser("live")
    p_live.add_argument("--process", required=True, choices=sorted(LIVE))
    p_live.add_argument("--out", required=True, type=Path)
    p_derive = sub.add_parser("derive")
    p_derive.add_argument("--material", required=True, nargs="+", type=Path)
    p_derive.add_argument("--out", required=True, type=Path)
    p_check = sub.add_parser("check")
    p_check.add_argument("--data", required=True, type=Path)
    args = parser.parse_args()
    if args.step == "live":
        args.out.write_text(json.dumps(asyncio.run(live(args.process))))
    elif args.step == "derive":
        materials = [json.loads(p.read_text()) for p in args.material]
        args.out.write_text(json.dumps(asyncio.run(derive(materials))))
    else:
        problems = asyncio.run(check(json.loads(args.data.read_text())))
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"checked: {len(problems)} delivery(ies) differ", file=sys.stderr)
        sys.stdout.flush()
        os._exit(1 if problems else 0)
    # AgentOps and LiteLLM leave non-daemon threads behind; the results are written, so leave now.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
