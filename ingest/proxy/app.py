"""LLM proxy: OpenAI-compatible routes that forward through litellm and record every call as a span.

Routes keep upstream's shape: ``/v1/chat/completions`` and ``/v1/completions``, and the same under
``/rollout/{rollout_id}/attempt/{attempt_id}/v1/...`` whose ids tag the span (unprefixed routes
read the ``x-rollout-id`` / ``x-attempt-id`` headers). ``x-sequence-id`` is honoured when sent;
otherwise the proxy numbers calls as they arrive from its own per-rollout counter, as upstream's
LLMProxy takes the next id of its store's rollout counter (see ``agl_stream_ingest.sequence``).
OpenAI's Responses API (``/v1/responses``) and Anthropic's Messages API (``/v1/messages``: the Anthropic SDK's
``ANTHROPIC_BASE_URL`` is the proxy's ``/rollout/{rollout_id}/attempt/{attempt_id}``) are served over the
chat path and recorded as chat calls (see ``.dialects``). Upstream v1.0's shapes are served too, so its agents run unchanged: the model under
``/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{train|val}/openai/v1/...``, and the agent's events
(a reward, say) at ``/api/rollouts/{rollout_id}/attempt/{attempt_id}/events`` (see ``.events``).

The span is produced and acknowledged by the broker *before* the answer is complete (before the
JSON body, or before ``data: [DONE]`` of a stream): once an agent has its completion, the record
of that call is durable, so an attempt that finishes after its last LLM call never races its own
spans. Chat streams are passed through chunk by chunk while token ids are collected; streamed text
completions are fetched whole and re-emitted as SSE because litellm drops their token ids.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Literal, Optional

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agl_stream.config import Settings
from agl_stream.tracer.sizing import fit_span
from agl_stream.types import Span
from agl_stream_ingest.http import add_operations, read_body_within
from agl_stream_ingest.metrics import BACKEND_LATENCY, SPANS_REJECTED, SPANS_TRUNCATED
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.stopping import stop_with_manager
from agl_stream_ingest.proxy import sse
from agl_stream_ingest.proxy.backend import (
    BackendRequest,
    call_backend,
    error_message,
    error_status,
    make_router,
    response_headers,
    shape_request,
)
from agl_stream_ingest.proxy.capture import Completion, Kind, StreamAccumulator, from_response
from agl_stream_ingest.proxy.config import ModelConfig, ProxyConfig
from agl_stream_ingest.proxy.dialects import AnthropicMessages, Dialect, OpenAIResponses
from agl_stream_ingest.proxy.drain import CallGate, released_after
from agl_stream_ingest.proxy.events import EventRefused, build_event_span, parse_event
from agl_stream_ingest.proxy.record import LlmCall, build_llm_span
from agl_stream_ingest.publisher import PublishError, SpanPublisher
from agl_stream_ingest.security import check_token
from agl_stream_ingest.proxy.attempt_access import AttemptAccess, FinishedAttempts
from agl_stream_ingest.sequence import SequenceAllocator

logger = logging.getLogger(__name__)

SERVER = "proxy"
#: the mode segment of upstream v1.0's route (``.../mode/{train|val}/openai/v1``); the rollout's own mode rules
RolloutModeSegment = Literal["train", "val"]
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


@dataclass
class CallContext:
    """Who a call belongs to; ``None`` ids mean an untracked call (``require_ids`` off)."""

    rollout_id: Optional[str]
    attempt_id: Optional[str]
    sequence_id: int
    trace_id: Optional[str]
    parent_id: Optional[str]


class ClosingStreamingResponse(StreamingResponse):
    """Closes its body generator however the response ends, so a hang-up is handled at once.

    Starlette stops iterating when the client disconnects but leaves the generator suspended until
    garbage collection; closing it here runs the generator's cleanup (recording the call) right away.
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            closer = getattr(self.body_iterator, "aclose", None)
            if closer is not None:
                await closer()


def openai_error(status: int, message: str, headers: Optional[dict[str, str]] = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status, headers=headers)


def _client_view(doc: dict[str, Any]) -> dict[str, Any]:
    """vLLM's response shape: per-choice ``token_ids`` where litellm moved them aside."""
    for choice in doc.get("choices") or []:
        fields = choice.get("provider_specific_fields")
        if isinstance(fields, dict) and "token_ids" in fields:
            choice["token_ids"] = fields.pop("token_ids")
            if not fields:
                choice.pop("provider_specific_fields")
    return doc


class ProxyService:
    """Request handling, separate from routing so both route shapes share it."""

    def __init__(self, settings: Settings, options: IngestOptions, config: ProxyConfig, publisher: SpanPublisher) -> None:
        self.settings = settings
        self.options = options
        self.config = config
        self.publisher = publisher
        self.router = make_router(config, options.request_timeout)
        self.sequences = SequenceAllocator()
        self._background: set[asyncio.Task[None]] = set()
        self.finished = FinishedAttempts(settings) if options.attempt_key_secret else None
        self.gate = CallGate()
        self.access = AttemptAccess(options.token, options.attempt_key_secret, self.finished)

    # ---------------------------------------------------------------- request parsing

    async def parse(self, request: Request, kind: Kind, rollout_id: Optional[str] = None,
                    attempt_id: Optional[str] = None) -> tuple[dict[str, Any], ModelConfig]:  # fmt: skip
        body = await self._read_json(request, rollout_id, attempt_id)
        if kind == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
                raise HTTPException(400, "'messages' must be a non-empty list of message objects")
        elif not isinstance(body.get("prompt"), (str, list)):
            raise HTTPException(400, "'prompt' is required (a string or a list)")
        return body, self._model(body["model"])

    async def _read_json(self, request: Request, rollout_id: Optional[str], attempt_id: Optional[str]) -> dict[str, Any]:
        """The caller's key checked for the attempt, then its body: a JSON object naming a model."""
        self.access.check(request, rollout_id or request.headers.get("x-rollout-id") or None,
                          attempt_id or request.headers.get("x-attempt-id") or None)  # fmt: skip
        media_type = request.headers.get("content-type", "application/json").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            raise HTTPException(415, f"unsupported Content-Type {media_type!r}: send application/json")
        raw = await read_body_within(request, self.options.max_body_bytes, self.options.request_timeout)
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise HTTPException(400, f"invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise HTTPException(400, f"request body must be a JSON object, got {type(body).__name__}")
        model_name = body.get("model")
        if not isinstance(model_name, str) or not model_name:
            raise HTTPException(400, "'model' is required (a string)")
        return body

    def _model(self, model_name: str) -> ModelConfig:
        model = self.config.model(model_name)
        if model is None:
            raise HTTPException(404, f"model {model_name!r} is not served here; available: {self.config.model_names}")
        return model

    def context(self, request: Request, rollout_id: Optional[str], attempt_id: Optional[str]) -> CallContext:
        rollout_id = rollout_id or request.headers.get("x-rollout-id") or None
        attempt_id = attempt_id or request.headers.get("x-attempt-id") or None
        trace_id = parent_id = None
        match = _TRACEPARENT.match(request.headers.get("traceparent", "").strip().lower())
        if match:
            trace_id, parent_id = match.group(1), match.group(2)
        if not rollout_id or not attempt_id:
            if self.config.require_ids:
                SPANS_REJECTED.labels(SERVER, "missing_ids").inc()
                raise HTTPException(
                    400,
                    "no rollout/attempt ids: call /rollout/{rollout_id}/attempt/{attempt_id}/v1/... "
                    "or send x-rollout-id and x-attempt-id headers",
                )
            return CallContext(None, None, 0, trace_id, parent_id)
        raw_sequence = request.headers.get("x-sequence-id")
        if raw_sequence is not None:
            if not raw_sequence.strip().isdigit():
                raise HTTPException(400, f"x-sequence-id must be a non-negative integer, got {raw_sequence!r}")
            sequence_id = int(raw_sequence)
            self.sequences.observe(rollout_id, attempt_id, sequence_id)
        else:
            sequence_id = self.sequences.next(rollout_id, attempt_id)
        return CallContext(rollout_id, attempt_id, sequence_id, trace_id, parent_id)

    # ---------------------------------------------------------------- recording

    def _span(self, ctx: CallContext, kind: Kind, body: dict[str, Any], model: ModelConfig, stream: bool,
              started: float, completion: Optional[Completion], error: Optional[str],
              api: Optional[str] = None) -> Optional[Span]:  # fmt: skip
        if ctx.rollout_id is None or ctx.attempt_id is None:
            return None
        if completion is not None and completion.policy_version is None:
            completion.policy_version = model.policy_version
        return build_llm_span(LlmCall(
            rollout_id=ctx.rollout_id, attempt_id=ctx.attempt_id, sequence_id=ctx.sequence_id, kind=kind,
            request=body, provider=model.provider, streaming=stream, start_time=started, end_time=time.time(),
            completion=completion, error=error, trace_id=ctx.trace_id, parent_id=ctx.parent_id, api=api,
        ))

    async def record(self, span: Optional[Span]) -> None:
        """Produce the span and wait for the broker's ack (raises PublishError)."""
        if span is None:
            return
        try:
            payload, truncated = fit_span(span, self.publisher.max_record_bytes)
        except ValueError as exc:  # not even truncation brings it under the broker limit
            SPANS_REJECTED.labels(SERVER, "too_large").inc()
            raise PublishError(str(exc)) from exc
        if truncated:
            logger.warning("span %s of rollout %s was truncated to fit the broker limit", span.span_id, span.rollout_id)
            SPANS_TRUNCATED.labels(SERVER).inc()
        await self.publisher.publish([(span.rollout_id, payload)])

    async def record_event(self, request: Request, rollout_id: str, attempt_id: str) -> JSONResponse:
        """An agent's event (see :mod:`.events`) as a span of its attempt, answered once the broker has it."""
        self.access.check(request, rollout_id, attempt_id)
        raw = await read_body_within(request, self.options.max_body_bytes, self.options.request_timeout)
        try:
            event = parse_event(raw)
        except EventRefused as exc:
            raise HTTPException(400, str(exc)) from None
        sequence_id = self.sequences.next(rollout_id, attempt_id)
        try:
            await self.record(build_event_span(rollout_id, attempt_id, sequence_id, event))
        except PublishError as exc:
            raise HTTPException(503, f"the event could not be recorded: {exc}") from None
        return JSONResponse({"event_type": event.event_type, "sequence_id": sequence_id})

    def _spawn_record(self, span: Optional[Span]) -> "asyncio.Task[None]":
        """Produce in a task of its own, tracked until done (shutdown waits for it)."""
        task = asyncio.get_running_loop().create_task(self.record(span))
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: "asyncio.Task[None]") -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("a streamed call's span was not produced: %s", task.exception())

    async def drain(self) -> None:
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # ---------------------------------------------------------------- serving

    async def handle(self, request: Request, kind: Kind, rollout_id: Optional[str], attempt_id: Optional[str]) -> Response:
        body, model = await self.parse(request, kind, rollout_id, attempt_id)
        return await self._through_gate(request, kind, rollout_id, attempt_id, body, model, None)

    async def handle_dialect(self, request: Request, dialect: Dialect, rollout_id: Optional[str],
                             attempt_id: Optional[str]) -> Response:  # fmt: skip
        """A call in another API (:mod:`.dialects`): translated, sent and recorded as a chat call, answered in kind."""
        try:
            body = await self._read_json(request, rollout_id, attempt_id)
            chat_body = dialect.to_chat(body)
            return await self._through_gate(request, "chat", rollout_id, attempt_id, chat_body,
                                            self._model(body["model"]), dialect)  # fmt: skip
        except HTTPException as exc:
            if exc.status_code >= 500:
                logger.error("proxy request failed: %s", exc.detail)
            answer = dialect.error(exc.status_code, str(exc.detail))
            answer.headers.update(exc.headers or {})
            return answer

    async def _through_gate(self, request: Request, kind: Kind, rollout_id: Optional[str], attempt_id: Optional[str],
                            body: dict[str, Any], model: ModelConfig, dialect: Optional[Dialect]) -> Response:  # fmt: skip
        await self.gate.enter()  # waits while the replica is paused for a weight update (see .drain)
        try:
            response = await self._answer(request, kind, rollout_id, attempt_id, body, model, dialect)
        except BaseException:
            await self.gate.leave()
            raise
        if isinstance(response, StreamingResponse):  # in flight until its last chunk
            response.body_iterator = released_after(response.body_iterator, self.gate.leave)
        else:
            await self.gate.leave()
        return response

    async def _answer(self, request: Request, kind: Kind, rollout_id: Optional[str], attempt_id: Optional[str],
                      body: dict[str, Any], model: ModelConfig, dialect: Optional[Dialect] = None) -> Response:  # fmt: skip
        ctx = self.context(request, rollout_id, attempt_id)
        stream = bool(body.get("stream"))
        if stream and kind == "chat":
            return await self._stream_chat(ctx, body, model, dialect)
        shaped = shape_request(body, kind, model, self.config, stream=False, timeout=self.options.request_timeout)
        started = time.time()
        try:
            response = await call_backend(self.router, kind, shaped)
        except Exception as exc:  # every litellm failure becomes an answer and an ERROR span
            return await self._failed(ctx, kind, body, model, stream, started, exc, dialect)
        BACKEND_LATENCY.labels(model.model_name, "ok").observe(time.time() - started)
        doc = _client_view(response.model_dump())
        completion = from_response(doc, kind, response_headers(response))
        span = self._span(ctx, kind, body, model, stream, started, completion, None, dialect and dialect.api)
        try:
            await self.record(span)
        except PublishError as exc:
            message = f"the call succeeded but its span could not be recorded: {exc}"
            if dialect is not None:
                refused = dialect.error(503, message)
                refused.headers["Retry-After"] = "1"
                return refused
            return openai_error(503, message, {"Retry-After": "1"})
        if dialect is not None:
            return JSONResponse(dialect.answer(response))
        if stream:  # a streamed text completion: re-emitted from the whole answer
            return StreamingResponse(sse.completion_stream(doc, include_usage=_wants_usage(body)),
                                     media_type="text/event-stream")
        return JSONResponse(doc)

    async def _failed(self, ctx: CallContext, kind: Kind, body: dict[str, Any], model: ModelConfig, stream: bool,
                      started: float, exc: BaseException, dialect: Optional[Dialect] = None) -> Response:
        BACKEND_LATENCY.labels(model.model_name, "error").observe(time.time() - started)
        status, message = error_status(exc), error_message(exc)
        logger.warning("backend call for model %s failed (%d): %s", model.model_name, status, message)
        try:
            await self.record(self._span(ctx, kind, body, model, stream, started, None, message, dialect and dialect.api))
        except PublishError as publish_error:
            logger.error("span of a failed call was not produced: %s", publish_error)
        return dialect.error(status, message) if dialect is not None else openai_error(status, message)

    async def _stream_chat(self, ctx: CallContext, body: dict[str, Any], model: ModelConfig,
                           dialect: Optional[Dialect] = None) -> Response:  # fmt: skip
        shaped: BackendRequest = shape_request(body, "chat", model, self.config, stream=True,
                                               timeout=self.options.request_timeout)
        started = time.time()
        try:
            upstream = await call_backend(self.router, "chat", shaped)
        except Exception as exc:
            return await self._failed(ctx, "chat", body, model, True, started, exc, dialect)
        if dialect is not None:
            return ClosingStreamingResponse(self._relay_dialect(ctx, body, model, upstream, started, dialect),
                                            media_type="text/event-stream")
        include_usage = _wants_usage(body)
        return ClosingStreamingResponse(self._relay(ctx, body, model, upstream, started, include_usage),
                                        media_type="text/event-stream")

    def _recorded(self, ctx: CallContext, body: dict[str, Any], model: ModelConfig, upstream: Any, started: float,
                  api: Optional[str]) -> "_RecordedStream":
        def record(completion: Completion, error: Optional[str]) -> "asyncio.Task[None]":
            return self._spawn_record(self._span(ctx, "chat", body, model, True, started, completion, error, api))

        return _RecordedStream(upstream, model.model_name, started, record)

    async def _relay(self, ctx: CallContext, body: dict[str, Any], model: ModelConfig, upstream: Any,
                     started: float, include_usage: bool) -> AsyncIterator[bytes]:
        """The backend's chat chunks passed on as server-sent events; ``[DONE]`` only once the span is acknowledged."""
        stream = self._recorded(ctx, body, model, upstream, started, None)
        try:
            async for doc in stream.docs():
                if sse.is_usage_only(doc) and not include_usage:
                    continue
                yield sse.event(doc)
            yield sse.DONE
        except _StreamBroken as broken:
            yield sse.event({"error": {"message": broken.message, "type": "server_error", "code": broken.status}})
        finally:
            stream.record_if_abandoned()

    async def _relay_dialect(self, ctx: CallContext, body: dict[str, Any], model: ModelConfig, upstream: Any,
                             started: float, dialect: Dialect) -> AsyncIterator[bytes]:
        """A chat stream re-told in ``dialect``'s events; recorded as :meth:`_relay` records, and likewise the
        span is acknowledged before the stream's closing events (the chunks end only once it is)."""
        stream = self._recorded(ctx, body, model, upstream, started, dialect.api)
        try:
            async for event in dialect.stream(_LikeUpstream(stream.chunks(), upstream), model.model_name):
                yield event
        except _StreamBroken as broken:
            yield dialect.stream_error(broken.status, broken.message)
        finally:
            stream.record_if_abandoned()


class _RecordedStream:
    """A backend's chat stream, passed on chunk by chunk and recorded as one span when it ends.

    The span is produced when the backend's last chunk is in, and the stream ends only once the broker has
    acknowledged it (a client hanging up then does not cancel the produce half-way). A backend that breaks off
    mid-stream, or a span that cannot be recorded, ends it with :class:`_StreamBroken`; a client that hangs up
    before the end is recorded by :meth:`record_if_abandoned` as ``client disconnected``."""

    def __init__(self, upstream: Any, model_name: str, started: float,
                 record: Callable[[Completion, Optional[str]], "asyncio.Task[None]"]) -> None:
        self._upstream, self._model_name, self._started, self._record = upstream, model_name, started, record
        self._accumulator = StreamAccumulator()
        self._recording: Optional[asyncio.Task[None]] = None

    async def _pairs(self) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
        error: Optional[tuple[int, str]] = None
        try:
            async for chunk in self._upstream:
                doc = chunk.model_dump(exclude_none=True)
                self._accumulator.add(doc)
                yield chunk, doc
        except Exception as exc:  # the backend broke off mid-stream: record it, then tell the client
            error = (error_status(exc), error_message(exc))
            logger.warning("stream from model %s failed: %s", self._model_name, error[1])
        BACKEND_LATENCY.labels(self._model_name, "ok" if error is None else "error").observe(time.time() - self._started)
        self._recording = self._record(self._completion(), None if error is None else error[1])
        if error is not None:
            raise _StreamBroken(*error)
        try:
            await asyncio.shield(self._recording)
        except PublishError as exc:
            raise _StreamBroken(503, f"the span of this call could not be recorded: {exc}") from None

    async def docs(self) -> AsyncIterator[dict[str, Any]]:
        """The chunks as JSON documents (what the OpenAI stream re-emits)."""
        async for _chunk, doc in self._pairs():
            yield doc

    async def chunks(self) -> AsyncIterator[Any]:
        """The chunks as litellm's objects (what a dialect's adapter reads)."""
        async for chunk, _doc in self._pairs():
            yield chunk

    def record_if_abandoned(self) -> None:
        if self._recording is None:  # the client hung up (generator closed or cancelled) before the end
            self._record(self._completion(), "client disconnected")

    def _completion(self) -> Completion:
        return self._accumulator.result(response_headers(self._upstream))


class _LikeUpstream:
    """The recorded chunks, looking like litellm's stream (``logging_obj`` and the like) to its adapters."""

    def __init__(self, chunks: AsyncIterator[Any], upstream: Any) -> None:
        self._chunks, self._upstream = chunks, upstream

    def __aiter__(self) -> "_LikeUpstream":
        return self

    async def __anext__(self) -> Any:
        return await self._chunks.__anext__()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._upstream, name)


class _StreamBroken(Exception):
    """Ends a dialect's stream early: the backend broke off, or the span could not be recorded."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _wants_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def create_app(
    settings: Settings,
    options: Optional[IngestOptions] = None,
    config: Optional[ProxyConfig] = None,
    publisher: Optional[SpanPublisher] = None,
) -> FastAPI:
    """The proxy app; its lifespan starts the producer and flushes it (and pending spans) on shutdown."""
    options = options or IngestOptions()
    config = config or ProxyConfig.from_settings(settings)
    # One span per call, and the caller waits for its ack: no linger, latency over batching.
    publisher = publisher or SpanPublisher(settings, SERVER, timeout=options.produce_timeout, linger_ms=0)
    service = ProxyService(settings, options, config, publisher)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await publisher.start()
        if service.finished is not None:
            await service.finished.start()
        logger.info("LLM proxy serving %s, producing to %s%s", config.model_names, publisher.topic,
                    "; per-attempt keys checked" if service.finished is not None else "")  # fmt: skip
        try:
            yield
        finally:
            await service.drain()
            if service.finished is not None:
                await service.finished.stop()
            await publisher.stop()

    app = FastAPI(title="agl-stream LLM proxy", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service

    def health() -> tuple[bool, dict[str, Any]]:
        details: dict[str, Any] = {"server": SERVER}
        if service.finished is not None:  # per-attempt keys: what revokes them (a stuck follower refuses nothing)
            details["finished_attempts"] = service.finished.details()
        return True, details

    add_operations(app, SERVER, health)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code >= 500:
            logger.error("proxy request failed: %s", exc.detail)
        return openai_error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    async def models(request: Request) -> JSONResponse:
        service.access.check(request, None, None)
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "owned_by": "agl-stream"} for name in config.model_names]})

    async def chat(request: Request, rollout_id: Optional[str] = None, attempt_id: Optional[str] = None) -> Response:
        return await service.handle(request, "chat", rollout_id, attempt_id)

    async def completions(request: Request, rollout_id: Optional[str] = None, attempt_id: Optional[str] = None) -> Response:
        return await service.handle(request, "completion", rollout_id, attempt_id)

    for prefix in ("", "/rollout/{rollout_id}/attempt/{attempt_id}"):
        app.add_api_route(f"{prefix}/v1/chat/completions", chat, methods=["POST"])
        app.add_api_route(f"{prefix}/v1/completions", completions, methods=["POST"])
        app.add_api_route(f"{prefix}/v1/models", models, methods=["GET"])

    # upstream v1.0's shapes (AGL_OPENAI_BASE_URL, AGL_EVENT_URL), so its agents run here unchanged
    async def chat_v1(request: Request, rollout_id: str, attempt_id: str, mode: RolloutModeSegment) -> Response:
        return await service.handle(request, "chat", rollout_id, attempt_id)

    async def completions_v1(request: Request, rollout_id: str, attempt_id: str, mode: RolloutModeSegment) -> Response:
        return await service.handle(request, "completion", rollout_id, attempt_id)

    async def models_v1(request: Request, mode: RolloutModeSegment) -> JSONResponse:
        return await models(request)

    v1 = "/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{mode}/openai/v1"
    app.add_api_route(f"{v1}/chat/completions", chat_v1, methods=["POST"])
    app.add_api_route(f"{v1}/completions", completions_v1, methods=["POST"])
    app.add_api_route(f"{v1}/models", models_v1, methods=["GET"])

    # the other APIs agents speak (see .dialects): OpenAI's Responses, Anthropic's Messages
    async def responses(request: Request, rollout_id: Optional[str] = None, attempt_id: Optional[str] = None,
                        mode: Optional[RolloutModeSegment] = None) -> Response:  # fmt: skip
        return await service.handle_dialect(request, OpenAIResponses(), rollout_id, attempt_id)

    async def messages(request: Request, rollout_id: Optional[str] = None, attempt_id: Optional[str] = None,
                       mode: Optional[RolloutModeSegment] = None) -> Response:  # fmt: skip
        return await service.handle_dialect(request, AnthropicMessages(), rollout_id, attempt_id)

    anthropic_v1 = "/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{mode}/anthropic"
    for prefix in ("", "/rollout/{rollout_id}/attempt/{attempt_id}"):
        app.add_api_route(f"{prefix}/v1/responses", responses, methods=["POST"])
        app.add_api_route(f"{prefix}/v1/messages", messages, methods=["POST"])
    app.add_api_route(f"{v1}/responses", responses, methods=["POST"])
    app.add_api_route(f"{anthropic_v1}/v1/messages", messages, methods=["POST"])

    async def event(request: Request, rollout_id: str, attempt_id: str) -> JSONResponse:
        return await service.record_event(request, rollout_id, attempt_id)

    app.add_api_route("/api/rollouts/{rollout_id}/attempt/{attempt_id}/events", event, methods=["POST"])

    # pause/drain around a weight update (see .drain): the shared token only, never an attempt's key
    async def pause(request: Request, drain_timeout: float = 60.0) -> JSONResponse:
        check_token(request, options.token)
        return JSONResponse(await service.gate.pause(drain_timeout))

    async def resume(request: Request) -> JSONResponse:
        check_token(request, options.token)
        return JSONResponse(service.gate.resume())

    async def state(request: Request) -> JSONResponse:
        check_token(request, options.token)
        return JSONResponse(service.gate.state())

    app.add_api_route("/proxy/pause", pause, methods=["POST"])
    app.add_api_route("/proxy/resume", resume, methods=["POST"])
    app.add_api_route("/proxy/state", state, methods=["GET"])
    return app


def app_from_env() -> FastAPI:
    """uvicorn factory: every worker process builds its app from ``AGL_*`` variables."""
    stop_with_manager()
    settings = Settings.from_env()
    return create_app(settings, IngestOptions.from_settings(settings), ProxyConfig.from_settings(settings))
