"""``Trainer``: upstream's facade - point it at an agent and datasets and it runs the whole job.

``fit`` starts what is not already running (local broker, topics, stream processors with the
embedded ClickHouse, runner processes, the dashboard), runs the algorithm in this process with a
live progress display, and tears everything down at the end. Against a cluster (``AGL_KAFKA_BOOTSTRAP`` set) it starts only its own role:
``AGL_CURRENT_ROLE=runner`` runs runners until stopped, ``algorithm`` runs the algorithm only,
``both`` (default) does both. Ctrl+C stops everything gracefully; if one part crashes, the rest is
stopped and the error says which part and why.

Components follow upstream's convention: an instance, a dotted class path, or a dict of init
overrides for the default class. Services are separate processes started by their CLI commands,
so this module imports no service package (the arrows between services are topics).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from agl_stream.algorithm.base import Algorithm, build_component
from agl_stream.client import StoreClient
from agl_stream.config import Settings
from agl_stream.execution.local_stack import LocalStack
from agl_stream.execution.process import ServiceCrashed
from agl_stream.execution.progress import FitProgress
from agl_stream.litagent import FunctionalLitAgent, LitAgent
from agl_stream.types import NamedResources

logger = logging.getLogger(__name__)

DEFAULT_ALGORITHM = "agl_stream.algorithm.Baseline"
ComponentSpec = Union[None, str, Mapping[str, Any], Any]


def agent_path(agent: Union[str, LitAgent[Any], Any]) -> str:
    """The ``module:name`` (or ``file.py:name``) runner processes load the agent from."""
    if isinstance(agent, str):
        return agent
    target = agent.rollout_func if isinstance(agent, FunctionalLitAgent) else agent
    if isinstance(target, LitAgent) and not isinstance(target, FunctionalLitAgent):
        target = type(target)  # runners instantiate the class
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if not module or not name or "<" in name:
        raise ValueError(f"cannot locate {agent!r} for the runner processes; pass 'module:object' instead")
    if module == "__main__":
        main_file = getattr(sys.modules["__main__"], "__file__", None)
        if not main_file:
            raise ValueError("an agent defined in an interactive session cannot run in runner processes; put it in a module")
        return f"{Path(main_file).resolve()}:{name}"
    return f"{module}:{name}"


class Trainer:
    def __init__(
        self,
        algorithm: ComponentSpec = None,
        *,
        n_runners: int = 1,
        runner_concurrency: int = 1,
        adapter: Optional[str] = None,
        tracer: Optional[str] = None,
        initial_resources: Optional[NamedResources] = None,
        max_rollouts: Optional[int] = None,
        settings: Optional[Settings] = None,
        log_dir: Optional[Path] = None,
        dashboard: bool = True,
    ) -> None:
        """``adapter`` is the processors' adapter spec (e.g. ``"tracer:agent_match=write"``);
        ``tracer`` picks the runners' span export (``"kafka"`` or ``"otlp"``); ``dashboard`` serves
        ``agl-stream dashboard`` while the job runs (its URL is printed)."""
        if n_runners < 1 or runner_concurrency < 1:
            raise ValueError("n_runners and runner_concurrency must be >= 1")
        self.algorithm_spec = algorithm
        self.n_runners = n_runners
        self.runner_concurrency = runner_concurrency
        self.adapter = adapter
        self.tracer = tracer
        self.initial_resources = initial_resources
        self.max_rollouts = max_rollouts
        self.settings = settings
        self.log_dir = log_dir
        self.dashboard = dashboard

    # ---------------------------------------------------------------- public API

    def fit(self, agent: Union[str, LitAgent[Any], Any], train_dataset: Optional[Sequence[Any]] = None,
            val_dataset: Optional[Sequence[Any]] = None) -> Any:  # fmt: skip
        algorithm = build_component(self.algorithm_spec, DEFAULT_ALGORITHM, "algorithm")
        return asyncio.run(self._run(algorithm, agent_path(agent), train_dataset, val_dataset))

    def dev(self, agent: Union[str, LitAgent[Any], Any], dataset: Optional[Sequence[Any]] = None, *,
            dev_dataset: Optional[Sequence[Any]] = None, max_items: int = 10) -> Any:  # fmt: skip
        """Dry run: ``Baseline`` over at most ``max_items`` tasks with static resources."""
        from agl_stream.algorithm import Baseline

        items = dataset if dataset is not None else dev_dataset
        return asyncio.run(self._run(Baseline(max_items=max_items), agent_path(agent), items, None))

    # ---------------------------------------------------------------- the job

    async def _run(self, algorithm: Algorithm, agent: str, train: Optional[Sequence[Any]], val: Optional[Sequence[Any]]) -> Any:
        settings = self.settings or Settings.from_env()
        role = settings.current_role
        processor_args = ["--adapter", self.adapter] if self.adapter else []
        stack = LocalStack(settings, processor_args=processor_args, log_dir=self.log_dir)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        logger.info("starting the job [role=%s, %d runner process(es), agent %s]", role, self.n_runners, agent)
        try:
            settings = await stack.start()
            if role in ("runner", "both"):
                extra = ["--max-rollouts", str(self.max_rollouts)] if self.max_rollouts else []
                runner_env = {"AGL_SPAN_EXPORT": self.tracer} if self.tracer else {}
                stack.start_runners(agent, self.n_runners, concurrency=self.runner_concurrency, extra_args=extra, env=runner_env)
            if role == "runner":
                await self._supervise(stack, None, stop)
                return None
            dashboard_url = await stack.start_dashboard() if self.dashboard else None
            async with StoreClient(settings) as client:
                algorithm.bind(settings, client, initial_resources=self.initial_resources, adapter=self.adapter)
                # the live display (learner step, rollouts, ETA) instead of log lines, which go to trainer.log
                async with FitProgress(settings, dashboard_url=dashboard_url, log_file=stack.log_dir / "trainer.log"):
                    task = asyncio.create_task(algorithm.run(train, val), name="algorithm")
                    return await self._supervise(stack, task, stop)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            stack.stop()

    async def _supervise(self, stack: LocalStack, task: Optional["asyncio.Task[Any]"], stop: asyncio.Event) -> Any:
        """Wait for the algorithm (or a stop request), checking every second that no service died."""
        stop_wait = asyncio.create_task(stop.wait())
        try:
            while True:
                waiting = {stop_wait} if task is None else {stop_wait, task}
                done, _ = await asyncio.wait(waiting, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                if task is not None and task in done:
                    return task.result()
                if stop_wait in done:
                    logger.warning("stop requested; shutting down")
                    if task is not None:
                        task.cancel()
                        await asyncio.gather(task, return_exceptions=True)
                    return None
                try:
                    stack.check()
                except ServiceCrashed as exc:
                    logger.error("%s; stopping the job", exc)
                    if task is not None:
                        task.cancel()
                        await asyncio.gather(task, return_exceptions=True)
                    raise
        finally:
            stop_wait.cancel()

