"""``Trainer``: upstream's facade - point it at an agent and datasets and it runs the whole job.

``fit`` starts what is not already running (local broker, topics, stream processors with the
embedded ClickHouse, runner processes, the dashboard), runs the algorithm in this process with a
live progress display, and tears everything down at the end. Against a cluster (``AGL_KAFKA_BOOTSTRAP`` set) it starts only its own role:
``AGL_CURRENT_ROLE=runner`` runs runners until stopped, ``algorithm`` runs the algorithm only,
``both`` (default) does both. Ctrl+C stops everything gracefully; if one part crashes, the rest is
stopped and the error says which part and why.

Components follow upstream's convention: an instance, a class, a dotted class path, or a dict of
init overrides for the default class. The agent, tracer and hooks run in the runner processes and
the adapter in the processors process; they reach them as objects, with their constructor state,
through a components file (see :mod:`agl_stream.execution.components`). Services are separate
processes started by their CLI commands, so this module imports no service package.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from agl_stream.adapter import TraceAdapter, TraceToMessages, TracerTraceToTriplet, build_adapter
from agl_stream.algorithm.base import Algorithm, build_component
from agl_stream.client import StoreClient
from agl_stream.config import Settings, env_name
from agl_stream.execution.components import write_components
from agl_stream.execution.local_stack import LocalStack
from agl_stream.service import ServiceCrashed
from agl_stream.execution.fit_display import FitProgress
from agl_stream.litagent import FunctionalLitAgent, LitAgent
from agl_stream.runner.hooks import Hook
from agl_stream.tracer.base import Tracer
from agl_stream.types import NamedResources

logger = logging.getLogger(__name__)

DEFAULT_ALGORITHM = "agl_stream.algorithm.Baseline"
ComponentSpec = Union[None, str, Mapping[str, Any], Any]
#: ``tracer=`` strings that pick the runners' span export instead of a tracer class
EXPORT_MODES = ("kafka", "otlp")


def agent_path(agent: Union[str, LitAgent[Any], Any]) -> str:
    """The ``module:name`` (or ``file.py:name``) of an agent, for ``agl-stream runner --agent``."""
    if isinstance(agent, str):
        return agent
    target = agent.rollout_func if isinstance(agent, FunctionalLitAgent) else agent
    if isinstance(target, LitAgent) and not isinstance(target, FunctionalLitAgent):
        target = type(target)
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if not module or not name or "<" in name:
        raise ValueError(f"cannot locate {agent!r} for the runner processes; pass 'module:object' instead")
    if module == "__main__":
        main_file = getattr(sys.modules["__main__"], "__file__", None)
        if not main_file:
            raise ValueError("an agent defined in an interactive session has no module:object path")
        return f"{Path(main_file).resolve()}:{name}"
    return f"{module}:{name}"


def make_adapter(spec: ComponentSpec) -> TraceAdapter[Any]:
    """Upstream's adapter spec: None (``TracerTraceToTriplet()``), an instance, a class, a dict of
    ``TracerTraceToTriplet`` options (or with ``type``), or agl-stream's string spec
    (``"tracer:agent_match=write"``, ``"package.module:Class"``)."""
    if isinstance(spec, str):
        return build_adapter(spec)
    adapter = build_component(spec, TracerTraceToTriplet, "adapter")
    if not isinstance(adapter, TraceAdapter):
        raise TypeError(f"adapter must be a TraceAdapter, got {type(adapter).__name__}")
    return adapter


def make_tracer(spec: ComponentSpec) -> Union[None, str, Tracer]:
    """None (the runners' default tracer), an export mode (``"kafka"``/``"otlp"``), or a Tracer from
    an instance, class, dotted path or dict with ``type``."""
    if spec is None or (isinstance(spec, str) and spec in EXPORT_MODES):
        return spec
    tracer = build_component(spec, None, "tracer")
    if not isinstance(tracer, Tracer):
        raise TypeError(f"tracer must be a Tracer, got {type(tracer).__name__}")
    return tracer


def _n_runners_from(strategy: ComponentSpec) -> Optional[int]:
    """Upstream's execution strategy only tells how many runners to start: the local stack replaces it."""
    if strategy is None:
        return None
    if isinstance(strategy, str):
        if strategy not in ("cs", "shm"):
            raise ValueError(f"unknown strategy {strategy!r}; upstream's are 'cs' and 'shm'")
        return None
    value = strategy.get("n_runners") if isinstance(strategy, Mapping) else getattr(strategy, "n_runners", None)
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ValueError(f"strategy n_runners must be a positive int, got {value!r}")
    logger.info("strategy %r: its n_runners is used; agl-stream runs every strategy as the local stack of processes",
                strategy)  # fmt: skip
    return value


class Trainer:
    def __init__(
        self,
        algorithm: ComponentSpec = None,
        *,
        n_runners: Optional[int] = None,
        max_rollouts: Optional[int] = None,
        initial_resources: Optional[NamedResources] = None,
        tracer: ComponentSpec = None,
        adapter: ComponentSpec = None,
        hooks: Union[None, Hook, Sequence[Hook]] = None,
        strategy: ComponentSpec = None,
        store: Any = None,
        runner: Any = None,
        llm_proxy: Any = None,
        port: Optional[int] = None,
        dev: bool = False,
        n_workers: Optional[int] = None,
        max_tasks: Optional[int] = None,
        daemon: bool = True,
        triplet_exporter: ComponentSpec = None,
        runner_concurrency: int = 1,
        settings: Optional[Settings] = None,
        log_dir: Optional[Path] = None,
        dashboard: bool = True,
        runner_python: Optional[Union[str, Path]] = None,
    ) -> None:
        """Upstream's arguments, with the same meaning where agl-stream has the part:

        * ``algorithm``: what runs in this process (default ``Baseline``);
        * ``n_runners``: runner processes (``n_workers`` is upstream's deprecated alias); a
          ``strategy`` only contributes its ``n_runners`` (there is one execution model here);
        * ``tracer``: the runners' tracer (an object travels to them intact), or ``"kafka"`` /
          ``"otlp"`` to pick the span export of the default tracer;
        * ``adapter``: set on the algorithm, and - when it makes triplets - used by the triplet
          processor of a local stack (``TraceToMessages`` stays with the algorithm);
        * ``hooks``: run by every runner around each rollout;
        * ``max_rollouts`` (``max_tasks``): per runner process, then it exits.

        Upstream's ``store``, ``runner`` and ``llm_proxy`` components have no counterpart (topics
        replace the store; the runner is a service process; the LLM proxy is ``agl-stream ingest
        proxy``): passing one is an error that says so. agl-stream's own: ``runner_concurrency``
        (attempts at once per runner process), ``settings``, ``log_dir``, ``dashboard`` (serve
        ``agl-stream dashboard`` while the job runs and print its URL), ``runner_python`` (the
        interpreter of the runner processes, default ``AGL_RUNNER_PYTHON`` or this one: an agent whose
        framework lives in a side venv, given as ``"module:object"`` so this process need not import it).
        """
        if dev:
            warnings.warn("Trainer(dev=True) is deprecated; use Trainer.dev(...)", DeprecationWarning, stacklevel=2)
        if n_workers is not None:
            warnings.warn("`n_workers` is deprecated. Please use `n_runners`.", DeprecationWarning, stacklevel=2)
        if max_tasks is not None:
            warnings.warn("`max_tasks` is deprecated. Please use `max_rollouts`.", DeprecationWarning, stacklevel=2)
        for name, value, instead in (
            ("store", store, "the hub is Kafka topics: set AGL_KAFKA_BOOTSTRAP (and AGL_CURRENT_ROLE) to use a cluster"),
            ("runner", runner, "runners are `agl-stream runner` processes: use n_runners / runner_concurrency and hooks"),
            ("llm_proxy", llm_proxy, "run `agl-stream ingest proxy` and point the agent's LLM resource at it"),
        ):  # fmt: skip
            if value is not None:
                raise ValueError(f"Trainer({name}=...) has no counterpart in agl-stream: {instead}")
        if port is not None:
            logger.warning("Trainer(port=%s) ignored: there is no store server (agents talk to Kafka)", port)
        self.daemon = daemon
        runners = n_runners if n_runners is not None else n_workers
        self.n_runners = _n_runners_from(strategy) or runners or 1
        self.n_workers = self.n_runners
        if self.n_runners < 1 or runner_concurrency < 1:
            raise ValueError("n_runners and runner_concurrency must be >= 1")
        self.runner_concurrency = runner_concurrency
        self.max_rollouts = max_rollouts if max_rollouts is not None else max_tasks
        self.max_tasks = self.max_rollouts
        self.algorithm: Optional[Algorithm] = build_component(algorithm, None, "algorithm")
        if self.algorithm is not None and not isinstance(self.algorithm, Algorithm):
            raise TypeError(f"algorithm must be an Algorithm, got {type(self.algorithm).__name__}")
        self.adapter = make_adapter(adapter if adapter is not None else triplet_exporter)
        self.triplet_exporter = self.adapter
        self.tracer = make_tracer(tracer)
        self.hooks: tuple[Hook, ...] = () if hooks is None else (hooks,) if isinstance(hooks, Hook) else tuple(hooks)
        for hook in self.hooks:
            if not isinstance(hook, Hook):
                raise TypeError(f"hooks must be Hook instances, got {type(hook).__name__}")
        self.initial_resources = initial_resources
        self.settings = settings
        self.log_dir = log_dir
        self.dashboard = dashboard
        self.runner_python = Path(runner_python) if runner_python is not None else None

    # ---------------------------------------------------------------- public API

    def fit(self, agent: Union[str, LitAgent[Any], Any], train_dataset: Optional[Sequence[Any]] = None,
            val_dataset: Optional[Sequence[Any]] = None) -> Any:  # fmt: skip
        """Run the algorithm (default ``Baseline``) with the agent in the runner processes; returns
        what the algorithm's ``run`` returned (None when stopped)."""
        algorithm = self.algorithm if self.algorithm is not None else build_component(None, DEFAULT_ALGORITHM)
        return asyncio.run(self._run(algorithm, agent, train_dataset, val_dataset))

    def dev(self, agent: Union[str, LitAgent[Any], Any], train_dataset: Optional[Sequence[Any]] = None, *,
            val_dataset: Optional[Sequence[Any]] = None, dataset: Optional[Sequence[Any]] = None,
            dev_dataset: Optional[Sequence[Any]] = None, max_items: int = 10) -> Any:  # fmt: skip
        """Dry run with static resources: the trainer's algorithm if it is a ``FastAlgorithm``, else
        ``Baseline`` over at most ``max_items`` tasks per dataset."""
        from agl_stream.algorithm import Baseline, FastAlgorithm

        if self.algorithm is None:
            algorithm: Algorithm = Baseline(max_items=max_items)
        elif isinstance(self.algorithm, FastAlgorithm):
            algorithm = self.algorithm
        else:
            raise TypeError(f"Trainer.dev() requires a FastAlgorithm (e.g. Baseline); got {type(self.algorithm).__name__}")
        train = next((d for d in (train_dataset, dataset, dev_dataset) if d is not None), None)
        return asyncio.run(self._run(algorithm, agent, train, val_dataset))

    # ---------------------------------------------------------------- the job

    def _components(self, agent: Any, settings: Settings, local_processors: bool) -> tuple[list[str], list[str], dict[str, str]]:
        """(runner agent args, processor args, runner env): objects go through a components file."""
        runner_env = {env_name("span_export"): self.tracer} if isinstance(self.tracer, str) else {}
        if isinstance(agent, LitAgent):
            agent.set_trainer(self)
        runner_objects: dict[str, Any] = {}
        if isinstance(self.tracer, Tracer):
            runner_objects["tracer"] = self.tracer
        if self.hooks:
            runner_objects["hooks"] = list(self.hooks)
        directory = settings.data_dir / "components"
        if isinstance(agent, str) and not runner_objects:
            runner_args = ["--agent", agent]
        else:
            from agl_stream.runner.loader import load_agent

            runner_objects["agent"] = load_agent(agent) if isinstance(agent, str) else agent
            runner_args = ["--components", str(write_components(directory, runner_objects))]
        processor_args: list[str] = []
        if isinstance(self.adapter, TraceToMessages):
            pass  # a message adapter serves the algorithm (APO); the triplet processor keeps its default
        elif local_processors:
            processor_args = ["--components", str(write_components(directory, {"adapter": self.adapter}))]
        elif repr(self.adapter) != repr(TracerTraceToTriplet()):
            logger.warning("the adapter %r applies to this process only: the cluster's triplet processors use their own "
                           "--adapter setting", self.adapter)  # fmt: skip
        return runner_args, processor_args, runner_env

    async def _run(self, algorithm: Algorithm, agent: Any, train: Optional[Sequence[Any]], val: Optional[Sequence[Any]]) -> Any:
        settings = self.settings or Settings.from_env()
        if self.runner_python is not None:
            settings = Settings.model_validate({**settings.model_dump(), "runner_python": self.runner_python})
        role = settings.current_role
        stack = LocalStack(settings, log_dir=self.log_dir)
        runner_args, stack.processor_args, runner_env = self._components(agent, settings, stack.start_processors)
        written = [Path(a) for args in (runner_args, stack.processor_args) for flag, a in zip(args, args[1:]) if flag == "--components"]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        logger.info("starting the job [role=%s, %d runner process(es), agent %s]", role, self.n_runners,
                    agent if isinstance(agent, str) else type(agent).__name__)  # fmt: skip
        try:
            settings = await stack.start()
            if role in ("runner", "both"):
                extra = ["--max-rollouts", str(self.max_rollouts)] if self.max_rollouts else []
                stack.start_runners(runner_args, self.n_runners, concurrency=self.runner_concurrency, extra_args=extra,
                                    env=runner_env)  # fmt: skip
            if role == "runner":
                await self._supervise(stack, None, stop)
                return None
            dashboard_url = await stack.start_dashboard() if self.dashboard else None
            async with StoreClient(settings) as client:
                algorithm.set_trainer(self)
                algorithm.bind(settings, client, initial_resources=self.initial_resources, adapter=self.adapter)
                # the live display (learner step, rollouts, ETA) instead of log lines, which go to trainer.log
                async with FitProgress(settings, dashboard_url=dashboard_url, log_file=stack.log_dir / "trainer.log"):
                    if algorithm.is_async():
                        task = asyncio.create_task(algorithm.run(train, val), name="algorithm")
                    else:  # upstream allows a sync run(); keep it off the event loop
                        task = asyncio.create_task(asyncio.to_thread(algorithm.run, train, val), name="algorithm")
                    return await self._supervise(stack, task, stop)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            stack.stop()
            for path in written:
                path.unlink(missing_ok=True)

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

