"""The nemesis's services beyond the pipeline: the learner with the tiny model and the store front door.

Each is a :class:`~agl_stream.service.ServiceProcess` the executor can SIGKILL, pause or cut off, and
restart as a supervisor would. Both reach the brokers through the same per-node proxies as every other
client; the front door reads ClickHouse through the processors' SQL door, behind a proxy of its own so a
partition can cut that link too.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Optional

import yaml

from agl_stream.broker import free_port
from agl_stream.service import ServiceProcess, agl_command
from agl_stream_trainer.metrics import StepMetrics, read_jsonl_metrics

ROOT = Path(__file__).resolve().parents[3]
#: rollouts per GRPO group: the nemesis enqueues four consecutive tasks under one group id
GROUP_SIZE = 4
#: prompt and response token ids per LLM call of the workload (small: a learner step stays well under a second)
TOKENS = 8


def tiny_model(directory: Path) -> Path:
    """The random tiny Llama the learner trains (built once per run, in the run's folder)."""
    from agl_stream_trainer.models import build_tiny_model

    target = directory / "tiny-llama"
    return target if (target / "config.json").exists() else build_tiny_model(target, seed=0)


class SqlDoor:
    """Where the processors' SQL door listens (a fixed port, so a restart comes back at the same address), the
    token, and the address its readers use: a proxy in front of it."""

    def __init__(self, database: str = "agl") -> None:
        self.port, self.proxy_port, self.token, self.database = free_port(), free_port(), secrets.token_hex(16), database

    def processor_env(self) -> dict[str, str]:
        return {"AGL_SQL_DOOR_PORT": str(self.port), "AGL_SQL_DOOR_TOKEN": self.token}

    @property
    def reader_dsn(self) -> str:
        return f"http://agl:{self.token}@127.0.0.1:{self.proxy_port}/{self.database}"


def _service_env(stack_env: dict[str, str], **extra: str) -> dict[str, str]:
    return {**stack_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            **extra}  # fmt: skip


class FrontDoor(ServiceProcess):
    """``agl-stream ingest store`` on a fixed port (a restart comes back at the same address). Span counts are
    off: a client's calls may reach it before and after a restart (consumers wait their grace period)."""

    def __init__(self, stack_env: dict[str, str], door: SqlDoor, log_dir: Path) -> None:
        self.port = free_port()
        super().__init__(
            "store", agl_command("ingest", "store", "--port", str(self.port), "--no-span-counts"),
            env=_service_env(stack_env, AGL_CLICKHOUSE_DSN=door.reader_dsn), log_path=log_dir / "store.log",
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Learner(ServiceProcess):
    """``agl-stream trainer`` with the tiny model, learning from ``agl.triplets`` (no engine: nothing generates).

    Every :meth:`start` is a new run of the learner on the same checkpoint folder: its own config
    (``trainer-run<k>.yaml``) and step metrics (``steps-run<k>.jsonl``), resumed from the latest checkpoint. The
    runs' histories are what :func:`tests.faults.audit.audit_learner` reads."""

    def __init__(self, stack_env: dict[str, str], workdir: Path, model: Path, *, checkpoint_every: int = 5) -> None:
        self.workdir = workdir
        self.model = model
        self.checkpoint_every = checkpoint_every
        self.resumed_from: list[int] = []  # per run: the checkpointed step it started from
        workdir.mkdir(parents=True, exist_ok=True)
        env = _service_env(stack_env, AGL_DATA_DIR=str(workdir / "agl"), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        super().__init__("learner", [], env=env, log_path=workdir / "learner.log", cwd=ROOT)

    @property
    def checkpoints(self) -> Path:
        return self.workdir / "checkpoints"

    def _config(self, run: int) -> Path:
        path = self.workdir / f"trainer-run{run}.yaml"
        path.write_text(yaml.safe_dump({
            "run_id": "nemesis",
            "model": str(self.model),
            "engine": {"kind": "none"},
            "optim": {"lr": 1e-4},
            # one complete group per step; the workload's triplets carry no policy version (no staleness bound);
            # a group waits long enough for a member held up by faults
            "batcher": {"group_size": GROUP_SIZE, "batch_groups": 1, "min_group_size": 2, "max_staleness": None,
                        "group_timeout_s": 600},
            "checkpoint_every": self.checkpoint_every,
            "checkpoint_dir": str(self.checkpoints),
            "keep_checkpoints": 3,
            "idle_timeout_s": 86400,
            "metrics": {"clickhouse": False, "progress": False, "jsonl": str(self.workdir / f"steps-run{run}.jsonl")},
        }))  # fmt: skip
        return path

    def latest_checkpoint_step(self) -> int:
        from agl_stream_trainer.checkpoint import CheckpointManager

        latest = CheckpointManager(self.checkpoints).latest()
        return 0 if latest is None else int(latest.name.rsplit("-", 1)[1])

    def start(self) -> "Learner":
        run = len(self.resumed_from) + 1
        self.resumed_from.append(self.latest_checkpoint_step())
        self.argv = agl_command("trainer", "--config", str(self._config(run)))
        self.log_path = self.workdir / f"learner-run{run}.log"
        super().start()
        return self

    def runs(self) -> list[tuple[int, list[StepMetrics]]]:
        """Per run, in order: the step it resumed from and the steps it reported."""
        out = []
        for run, resumed_from in enumerate(self.resumed_from, start=1):
            path = self.workdir / f"steps-run{run}.jsonl"
            out.append((resumed_from, read_jsonl_metrics(path) if path.exists() else []))
        return out


def learner_summary(learner: Optional[Learner], audit: Any, succeeded_train: set[str], *,
                    trained: set[str]) -> dict[str, Any]:  # fmt: skip
    """The learner's section of the result: the audit of its checkpointed history, and succeeded rollouts it
    never trained (``trained``: in any step of the runs as they ended)."""
    if learner is None:
        return {}
    untrained = sorted(succeeded_train - trained)
    return {"runs": len(learner.resumed_from), "resumed_from": learner.resumed_from, "steps": len(audit.steps),
            "trained_rollouts": len(audit.trained), "twice": audit.duplicates, "untrained": len(untrained),
            "untrained_sample": untrained[:20], "problems": audit.problems}  # fmt: skip
