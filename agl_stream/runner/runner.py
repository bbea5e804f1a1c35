"""``LitAgentRunner``: executes an agent on the tasks of ``agl.tasks`` and reports everything as records.

One runner process is one consumer in the group ``agl-runners`` running up to ``concurrency``
attempts at once as asyncio tasks (sync agents run in worker threads, off the event loop). For
each task it

1. resolves the resources (by id, else the latest) from a local view of ``agl.resources``;
2. **claims** the attempt: reports ``started`` on ``agl.attempts`` and commits the task's offset,
   and waits for both acknowledgements before the agent runs;
3. heartbeats (with a system snapshot) while it runs, runs the hooks and the agent inside the
   tracer's trace context (spans go to ``agl.spans``);
4. turns the return value into spans, records an exception as a span if the agent raised;
5. waits until the attempt's spans are acknowledged, then reports ``finished`` (succeeded or
   failed, the error, the span count).

Why claim at start rather than commit at the end: an attempt id names one execution. Had the task
stayed uncommitted until the attempt finished, a runner that died (or lost its partitions in a
rebalance, or its broker connection for a while) would hand the task to another runner that ran it
again under the *same* attempt id: the dead run's partial spans would mix into the new run's
trajectory, and attempts already finished behind an unfinished one (commits are positional) would
run twice. Once claimed, a task is the state machine's business: an attempt that stops
heartbeating becomes ``unresponsive`` and is requeued as a *new* attempt when the rollout's
``RolloutConfig`` allows it (``unresponsive_seconds``, ``retry_condition``, ``max_attempts``), as
upstream. Until the claim completes the agent has not run, so redelivery is harmless: a task whose
partition moved to another runner (a rebalance, a lost session) is left to its new owner, and a
runner that dies mid-claim leaves the task to the group; the only trace is a repeated ``started``
event, which the state machine ignores. A runner also remembers the attempts it claimed (the last
``CLAIMS_REMEMBERED``): a task record delivered again after its claim (the group's committed offset
went back, once in a 20,000-rollout nemesis run) is skipped, not run a second time under its id.

Worker heartbeats go to ``agl.workers``. On stop it takes no new tasks, lets running attempts
finish (up to ``shutdown_grace`` seconds, after which they are cancelled and reported failed),
flushes spans and commits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import os
import socket
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Sequence

from agl_stream.client.resources import ResourceCache
from agl_stream.config import Settings
from agl_stream.emitter.annotation import emit_exception
from agl_stream.kafka import DeadLetterWriter, Decoded, RecordConsumer, RecordProducer, Rejected
from agl_stream.service import Backoff, retrying
from agl_stream.kafka.claim import RUNNERS_GROUP, claim_record, is_preclaimed
from agl_stream.litagent import LitAgent
from agl_stream.runner.hooks import Hook, HookRunner
from agl_stream.runner.stats import RunnerStats
from agl_stream.runner.results import record_result
from agl_stream.runner.system_snapshot import system_snapshot
from agl_stream.tracer.base import Tracer
from agl_stream.tracer.exporter import AttemptCounters
from agl_stream.tracer.otel import OtelTracer
from agl_stream.types import AttemptedRollout, AttemptEvent, DeadLetter, NamedResources, Worker

logger = logging.getLogger(__name__)

RUNNER_GROUP = RUNNERS_GROUP
SHUTDOWN_ERROR = "cancelled: runner shutting down"
_NOT_CLAIMING = object()  # no claim of the attempt under way (a tenure may be None: not assigned)

#: attempt ids a runner remembers having claimed (about 100 bytes each), so a redelivered task never runs twice
CLAIMS_REMEMBERED = 100_000

_CURRENT: contextvars.ContextVar[Optional["LitAgentRunner"]] = contextvars.ContextVar("agl_runner", default=None)


def current_runner() -> Optional["LitAgentRunner"]:
    """The runner executing the attempt of this context (it follows the agent into its threads and
    tasks): agent-side code such as ``agl_stream.air`` rules reaches the runner's producer through it."""
    return _CURRENT.get()


def default_worker_id() -> str:
    return f"Worker-{socket.gethostname()}-{os.getpid()}"


class LitAgentRunner:
    def __init__(
        self,
        agent: LitAgent[Any],
        settings: Settings,
        *,
        tracer: Optional[Tracer] = None,
        hooks: Sequence[Hook] = (),
        worker_id: Optional[str] = None,
        concurrency: int = 1,
        max_rollouts: Optional[int] = None,
        heartbeat_interval: float = 10.0,
        group_id: Optional[str] = None,
        resources_wait: float = 10.0,
        shutdown_grace: float = 30.0,
        commit_interval: float = 0.5,
        poll_timeout: float = 0.5,
        flush_timeout: float = 120.0,
        include_gpu: bool = False,
        bootstrap: Optional[str] = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if max_rollouts is not None and max_rollouts < 1:
            raise ValueError("max_rollouts must be at least 1 (or None for unlimited)")
        self.agent = agent
        self.settings = settings
        self._tracer = tracer
        self.hooks = HookRunner(hooks)
        self.worker_id = worker_id or default_worker_id()
        self.concurrency = concurrency
        self.max_rollouts = max_rollouts
        self.heartbeat_interval = heartbeat_interval
        self.group_id = group_id or settings.group("runners")  # agl-runners with the default prefix
        self.resources_wait = resources_wait
        self.shutdown_grace = shutdown_grace
        self.commit_interval = commit_interval
        self.poll_timeout = poll_timeout
        self.flush_timeout = flush_timeout
        self.include_gpu = include_gpu
        self.bootstrap = bootstrap
        self.stats = RunnerStats()
        self.force_stop = asyncio.Event()
        self._producer: Optional[RecordProducer] = None
        self._consumer: Optional[RecordConsumer] = None
        self._resources: Optional[ResourceCache] = None
        self._running: dict[asyncio.Task[None], AttemptedRollout] = {}
        # attempts this runner claimed: a record redelivered after its claim (the group's offset went back,
        # seen once in a 20,000-rollout nemesis run) must not run the same attempt id a second time
        self._claimed: OrderedDict[str, None] = OrderedDict()
        self._claiming: dict[str, Optional[int]] = {}  # attempt id -> the tenure of the delivery being claimed
        self._background: list[asyncio.Task[None]] = []
        self._commit_lock = asyncio.Lock()
        self._worker = Worker(worker_id=self.worker_id, status="idle")
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._agent_letters: set["concurrent.futures.Future[None]"] = set()  # dead letters sent by agent code
        # One thread per concurrent attempt for sync agents (asyncio's default pool may be smaller).
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="agl-agent")

    # ---------------------------------------------------------------- accessors (upstream names)

    @property
    def tracer(self) -> Tracer:
        if self._tracer is None:
            raise RuntimeError("runner is not started")
        return self._tracer

    def get_agent(self) -> LitAgent[Any]:
        return self.agent

    def get_worker_id(self) -> str:
        return self.worker_id

    # ---------------------------------------------------------------- lifecycle

    async def run(self, stop: Optional[asyncio.Event] = None) -> RunnerStats:
        """Run until ``stop`` is set or ``max_rollouts`` attempts finished; returns the counters."""
        stop = stop or asyncio.Event()
        try:
            await self._start()
            await self._consume(stop)
        finally:
            await self._shutdown()
        logger.info("runner %s stopped: %s", self.worker_id, self.stats.summary())
        return self.stats

    async def _start(self) -> None:
        if self._tracer is None:
            from agl_stream.tracer.factory import create_tracer

            self._tracer = create_tracer(self.settings)
        elif isinstance(self._tracer, OtelTracer) and not self._tracer.has_pipeline:
            from agl_stream.tracer.factory import create_pipeline

            self._tracer.attach_pipeline(create_pipeline(self.settings))  # upstream's bare ``OtelTracer()``
        await asyncio.to_thread(self._tracer.init)
        self.agent.set_runner(self)
        self._loop = asyncio.get_running_loop()
        self._producer = await RecordProducer(self.settings, self.bootstrap).start()
        self._resources = await ResourceCache(self.settings, bootstrap=self.bootstrap).start()
        self._consumer = RecordConsumer(
            self.settings,
            [self.settings.topic("tasks")],
            self.group_id,
            self.bootstrap,
            max_poll_records=max(1, self.concurrency),
            max_poll_interval_ms=3_600_000,  # a rollout may run long between polls; liveness is the session heartbeat
            claims=True,
        )
        await self._consumer.start()
        self._background = [
            asyncio.create_task(self._heartbeat_loop(), name="agl-runner-heartbeat"),
            asyncio.create_task(self._commit_loop(), name="agl-runner-commit"),
        ]
        limit = "unlimited" if self.max_rollouts is None else str(self.max_rollouts)
        logger.info("runner %s started (concurrency %d, max rollouts %s)", self.worker_id, self.concurrency, limit)

    async def _shutdown(self) -> None:
        await self._drain_running()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background = []
        try:
            if self._producer is not None:
                await self._send_worker("offline")
        except Exception as exc:
            logger.warning("could not publish the final worker heartbeat: %r", exc)
        if self._consumer is not None:
            await self._consumer.stop(commit=True)
        if self._resources is not None:
            await self._resources.stop()
        if self._producer is not None:
            await self._producer.stop()
        if self._tracer is not None:
            await asyncio.to_thread(self._tracer.teardown)
        self._executor.shutdown(wait=False, cancel_futures=True)  # a cancelled sync agent may still be running

    async def _drain_running(self) -> None:
        """Let running attempts finish for up to ``shutdown_grace`` seconds (or until ``force_stop``), then cancel."""
        if not self._running:
            return
        logger.info("waiting up to %.0fs for %d running attempt(s) to finish", self.shutdown_grace, len(self._running))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.shutdown_grace
        force = asyncio.create_task(self.force_stop.wait())
        try:
            while self._running and not self.force_stop.is_set():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                await asyncio.wait([*self._running, force], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            force.cancel()
        pending = list(self._running)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    # ---------------------------------------------------------------- consuming tasks

    async def _consume(self, stop: asyncio.Event) -> None:
        assert self._consumer is not None
        stop_wait = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                if self.max_rollouts is not None and self.stats.rollouts_started >= self.max_rollouts:
                    if self._running:
                        await asyncio.wait([*self._running, stop_wait], return_when=asyncio.FIRST_COMPLETED)
                        continue
                    break
                free = self.concurrency - len(self._running)
                if free <= 0:
                    await asyncio.wait([*self._running, stop_wait], return_when=asyncio.FIRST_COMPLETED)
                    continue
                if self.max_rollouts is not None:
                    free = min(free, self.max_rollouts - self.stats.rollouts_started)
                try:
                    good, bad = await self._consumer.get_decoded(AttemptedRollout, timeout=self.poll_timeout, max_records=free)
                except Exception as exc:  # transient broker trouble: the client reconnects; keep polling
                    logger.warning("fetching tasks failed (%r); retrying", exc)
                    await asyncio.sleep(0.5)
                    continue
                for rejected in bad:
                    try:
                        await self._dead_letter(rejected)
                    except Exception as exc:  # not marked done: the record is redelivered and retried
                        logger.error("could not dead-letter task record at offset %d: %r", rejected.record.offset, exc)
                for decoded in good:
                    if is_preclaimed(decoded.headers):  # written by start_rollout/start_attempt: its writer runs it
                        self._consumer.done(decoded.record)
                        continue
                    if self._already_claimed(decoded):
                        self._consumer.done(decoded.record)  # this runner ran it: the offset may move past it
                        continue
                    self._launch(decoded)
        finally:
            stop_wait.cancel()

    def _already_claimed(self, decoded: Decoded[AttemptedRollout]) -> bool:
        """The attempt's claim held here, or a claim of it is under way from a delivery of the same tenure (the task
        record written twice). A claim under way from an earlier tenure does not count: the rebalance between them
        makes it give the task up unless its commit landed, and then the group would not have delivered it again;
        skipping this delivery could leave the task to nobody (a broker restart: stuck ``preparing``)."""
        attempt_id = decoded.value.attempt.attempt_id
        claiming = self._claiming.get(attempt_id, _NOT_CLAIMING)
        if attempt_id not in self._claimed and claiming != decoded.tenure:
            return False
        self.stats.redelivered_skipped += 1
        logger.warning("task %s (attempt %s, %s[%d]@%d) delivered again after this runner took it; not run twice",
                       decoded.value.rollout_id, attempt_id, decoded.record.topic, decoded.record.partition,
                       decoded.record.offset)  # fmt: skip
        return True

    def _remember_claim(self, attempt_id: str) -> None:
        self._claimed[attempt_id] = None
        while len(self._claimed) > CLAIMS_REMEMBERED:
            self._claimed.popitem(last=False)

    def _launch(self, decoded: Decoded[AttemptedRollout]) -> None:
        self.stats.rollouts_started += 1
        self.stats.running += 1
        task = asyncio.create_task(self._run_task(decoded), name=f"rollout-{decoded.value.rollout_id}")
        self._running[task] = decoded.value
        task.add_done_callback(self._forget)

    def _forget(self, task: "asyncio.Task[None]") -> None:
        self._running.pop(task, None)
        self.stats.running -= 1
        if not task.cancelled() and task.exception() is not None:
            logger.error("rollout task crashed: %r", task.exception())

    async def _dead_letter(self, rejected: Rejected) -> None:
        assert self._producer is not None and self._consumer is not None
        record = rejected.record
        self.stats.rollouts_rejected += 1
        logger.error("task record %s[%d]@%d rejected: %s", record.topic, record.partition, record.offset, rejected.error.reason)
        writer = DeadLetterWriter(self.settings.topic("dlq"), self._producer, f"runner:{self.worker_id}")
        await (await writer.send(rejected.error.reason, record=record, error_type=type(rejected.error).__name__))
        self._consumer.done(record)

    def send_dead_letter(self, letter: DeadLetter) -> "concurrent.futures.Future[None]":
        """Produce ``letter`` on ``agl.dlq`` from agent code in any thread, without blocking it; the
        attempt's ``finished`` waits for the letter, so it is on the topic when the rollout ends."""
        loop, producer = self._loop, self._producer
        if loop is None or producer is None:
            raise RuntimeError("runner is not started")

        async def send() -> None:
            await (await producer.send(self.settings.topic("dlq"), letter, key=letter.key))

        future = asyncio.run_coroutine_threadsafe(send(), loop)
        self._agent_letters.add(future)
        future.add_done_callback(self._agent_letters.discard)
        return future

    # ---------------------------------------------------------------- one attempt

    async def _run_task(self, decoded: Decoded[AttemptedRollout]) -> None:
        rollout = decoded.value
        started = time.monotonic()
        self._claiming[rollout.attempt.attempt_id] = decoded.tenure
        try:
            claimed = await self._claim(decoded)
        except asyncio.CancelledError:  # shutdown before the claim: the task is redelivered, nothing ran
            self.stats.rollouts_started -= 1
            raise
        finally:
            if self._claiming.get(rollout.attempt.attempt_id) == decoded.tenure:
                del self._claiming[rollout.attempt.attempt_id]
        if not claimed:
            self.stats.rollouts_started -= 1
            return
        self._remember_claim(rollout.attempt.attempt_id)
        self._set_busy(rollout)
        status, error = "failed", SHUTDOWN_ERROR
        holder: list[AttemptCounters] = []
        try:
            status, error = await self._execute(rollout, holder)
        except asyncio.CancelledError:
            logger.warning("attempt %s of %s cancelled by shutdown", rollout.attempt.attempt_id, rollout.rollout_id)
        finally:
            state = holder[0] if holder else None
            spans = list(state.spans) if state is not None else []
            await self.hooks.fire("on_rollout_end", agent=self.agent, runner=self, rollout=rollout, spans=spans)
            await self._finish(rollout, status, error, state, time.monotonic() - started)

    async def _execute(self, rollout: AttemptedRollout, holder: list[AttemptCounters]) -> tuple[str, Optional[str]]:
        """Run the agent in the attempt's trace context; the context's counters are put in ``holder``."""
        tracer = self.tracer
        _CURRENT.set(self)  # this task's own context (and the agent's copies of it)
        await self.hooks.fire("on_rollout_start", agent=self.agent, runner=self, rollout=rollout)
        status, error = "succeeded", None
        async with tracer.trace_context(
            rollout.rollout_id,
            rollout_id=rollout.rollout_id,
            attempt_id=rollout.attempt.attempt_id,
            extra_resource={"agl.worker_id": self.worker_id},
        ) as state:
            holder.append(state)
            await self.hooks.fire("on_trace_start", agent=self.agent, runner=self, tracer=tracer, rollout=rollout)
            try:
                resources = await self._resolve_resources(rollout)
                result = await self._invoke(rollout, resources)
                record_result(result, tracer, state)
            except Exception as exc:
                status, error = "failed", f"{type(exc).__name__}: {exc}"
                logger.warning("rollout %s failed: %s", rollout.rollout_id, error,
                               extra={"rollout_id": rollout.rollout_id, "attempt_id": rollout.attempt.attempt_id})  # fmt: skip
                try:
                    emit_exception(exc)
                except Exception:
                    logger.exception("could not record the exception of rollout %s as a span", rollout.rollout_id)
            finally:
                await self.hooks.fire("on_trace_end", agent=self.agent, runner=self, tracer=tracer, rollout=rollout)
        return status, error

    async def _resolve_resources(self, rollout: AttemptedRollout) -> NamedResources:
        assert self._resources is not None
        # Agents that ask for no resource (``needs_resources`` False) never wait for any.
        wait = self.resources_wait if getattr(self.agent, "needs_resources", True) else 0.0
        update = await self._resources.resolve(rollout.resources_id, timeout=wait)
        return dict(update.resources) if update is not None else {}

    async def _invoke(self, rollout: AttemptedRollout, resources: NamedResources) -> Any:
        agent = self.agent
        train = rollout.mode == "train"
        if agent.is_async():
            method = agent.training_rollout_async if train else agent.validation_rollout_async
            return await method(rollout.input, resources, rollout)
        method_sync = agent.training_rollout if train else agent.validation_rollout
        context = contextvars.copy_context()  # the active attempt follows the agent into its thread
        call = functools.partial(context.run, method_sync, rollout.input, resources, rollout)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _finish(
        self,
        rollout: AttemptedRollout,
        status: str,
        error: Optional[str],
        state: Optional[AttemptCounters],
        duration: float,
    ) -> None:
        span_count, dropped, reward = 0, 0, None
        if state is not None:
            try:
                await self.tracer.flush_attempt(state, timeout=self.flush_timeout)
            except Exception as exc:
                logger.error("spans of attempt %s were not all confirmed: %r", rollout.attempt.attempt_id, exc)
            span_count, dropped, reward = state.submitted, state.dropped, state.last_reward
        pending = [asyncio.wrap_future(f) for f in list(self._agent_letters)]
        if pending:  # dead letters agent code sent (AIR rules) land before the attempt ends
            done, _ = await asyncio.wait(pending, timeout=self.flush_timeout)
            for failed in (f for f in done if f.exception() is not None):
                logger.error("a dead letter of attempt %s was not delivered: %r", rollout.attempt.attempt_id,
                             failed.exception())  # fmt: skip
        metadata: dict[str, Any] = {"duration_seconds": round(duration, 6), "spans_dropped": dropped}
        if reward is not None:
            metadata["final_reward"] = reward
            if state is not None and len(state.last_reward_dimensions) > 1:  # named parts beside the primary
                metadata["reward_dimensions"] = dict(state.last_reward_dimensions)
        if not await self._report_finished(rollout, status, error, span_count, metadata):
            return
        self.stats.spans += span_count
        self.stats.spans_dropped += dropped
        if status == "succeeded":
            self.stats.rollouts_succeeded += 1
        else:
            self.stats.rollouts_failed += 1
        self._set_idle_if_free()
        logger.info(
            "rollout %s %s in %.3fs; %d span(s), final reward %s", rollout.rollout_id, status, duration, span_count, reward,
            extra={"rollout_id": rollout.rollout_id, "attempt_id": rollout.attempt.attempt_id, "status": status},
        )  # fmt: skip

    async def _claim(self, decoded: Decoded[AttemptedRollout]) -> bool:
        """Claim the task (:func:`agl_stream.kafka.claim.claim_record`) before anything runs.

        ``False``: the partition moved to another runner first; the task is its new owner's to run
        (at most our ``started`` event was written, which the state machine ignores as a repeat).
        """
        assert self._consumer is not None
        rollout = decoded.value
        claimed = await claim_record(self._consumer, decoded.record, lambda: self._send_event(rollout, "started", wait=True),
                                     self._commit, f"attempt {rollout.attempt.attempt_id}", decoded.tenure)  # fmt: skip
        return claimed or self._left_to_new_owner(rollout, decoded.record.partition)

    def _left_to_new_owner(self, rollout: AttemptedRollout, partition: int) -> bool:
        logger.info("task %s: partition %d was reassigned before the attempt was claimed; left to its new owner",
                    rollout.rollout_id, partition)  # fmt: skip
        return False

    async def _report_finished(
        self, rollout: AttemptedRollout, status: str, error: Optional[str], span_count: int, metadata: dict[str, Any]
    ) -> bool:
        """Report ``finished``, retrying for up to ``flush_timeout`` seconds (the task is already committed)."""
        try:
            async for attempt in retrying(f"report attempt {rollout.attempt.attempt_id} finished", backoff=Backoff(0.2, 5.0),
                                          timeout=self.flush_timeout, log=logger):  # fmt: skip
                with attempt:
                    await self._send_event(rollout, "finished", status=status, error=error, span_count=span_count,
                                           metadata=metadata, wait=True)  # fmt: skip
        except Exception as exc:
            # The state machine's watchdog closes the attempt (unresponsive) and retries it if configured.
            logger.error("could not report attempt %s finished (%r); giving up after %.0fs",
                         rollout.attempt.attempt_id, exc, self.flush_timeout)  # fmt: skip
            return False
        return True

    async def _commit(self) -> None:
        """Commit done offsets now; concurrent claims share one commit request."""
        assert self._consumer is not None
        async with self._commit_lock:
            await self._consumer.commit()

    # ---------------------------------------------------------------- records

    async def _send_event(
        self,
        rollout: AttemptedRollout,
        kind: str,
        *,
        wait: bool = False,
        **fields: Any,
    ) -> None:
        assert self._producer is not None
        # The rollout's own metadata (GRPO group id, epoch, ...) travels with every event, so the
        # triplet processor can put it on the trajectory; the runner's fields win on a clash.
        fields["metadata"] = {**rollout.metadata, **fields.get("metadata", {})}
        event = AttemptEvent(
            kind=kind,  # type: ignore[arg-type]
            rollout_id=rollout.rollout_id,
            attempt_id=rollout.attempt.attempt_id,
            attempt_sequence_id=rollout.attempt.sequence_id,
            worker_id=self.worker_id,
            mode=rollout.mode,
            resources_id=rollout.resources_id,
            **fields,
        )
        future = await self._producer.send(self.settings.topic("attempts"), event, key=rollout.rollout_id)
        if wait:
            await future
        else:
            future.add_done_callback(_log_failure(f"{kind} event of {rollout.attempt.attempt_id}"))

    def _set_busy(self, rollout: AttemptedRollout) -> None:
        now = time.time()
        self._worker.status = "busy"
        self._worker.last_dequeue_time = now
        self._worker.last_busy_time = now
        self._worker.current_rollout_id = rollout.rollout_id
        self._worker.current_attempt_id = rollout.attempt.attempt_id

    def _set_idle_if_free(self) -> None:
        if self.stats.running <= 1:  # the finishing task is still counted until its done-callback runs
            self._worker.status = "idle"
            self._worker.last_idle_time = time.time()
            self._worker.current_rollout_id = None
            self._worker.current_attempt_id = None

    async def _send_worker(self, status: Optional[str] = None, stats: Optional[dict[str, Any]] = None) -> None:
        assert self._producer is not None
        if status is not None:
            self._worker.status = status  # type: ignore[assignment]
        self._worker.last_heartbeat_time = time.time()
        self._worker.heartbeat_stats = stats if stats is not None else system_snapshot(self.include_gpu)
        future = await self._producer.send(self.settings.topic("workers"), self._worker, key=self.worker_id)
        future.add_done_callback(_log_failure(f"heartbeat of {self.worker_id}"))

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                snapshot = system_snapshot(self.include_gpu)
                await self._send_worker(stats=snapshot)
                for rollout in list(self._running.values()):
                    await self._send_event(rollout, "heartbeat", stats=snapshot)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("heartbeat failed: %r", exc)
            await asyncio.sleep(self.heartbeat_interval)

    async def _commit_loop(self) -> None:
        assert self._consumer is not None
        while True:
            await asyncio.sleep(self.commit_interval)
            try:
                await self._commit()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # uncommitted work is redelivered, never lost
                logger.warning("offset commit failed (will retry): %r", exc)


def _log_failure(what: str) -> Any:
    def callback(future: "asyncio.Future[Any]") -> None:
        if not future.cancelled() and future.exception() is not None:
            logger.error("%s could not be delivered: %r", what, future.exception())

    return callback
