"""A starter for the nothing-left-behind tests: start KIND the way agl-stream's starters do, print every
process below this one as one JSON line, then wait to be killed.

    python -m tests.agl_stream.service.starter KINDS DATA_DIR

The local stack always (the broker, the trimmer, the processors' supervisor with its apps); KINDS, comma
separated, add ``runners`` (a two-process runner service), ``front-door`` (``agl-stream ingest store``) and
``learner`` (``agl-stream trainer`` with a tiny model built here).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import psutil

from agl_stream.broker import free_port, wait_for_port
from agl_stream.config import Settings
from agl_stream.execution.local_stack import LocalStack
from agl_stream.service import ServiceProcess, agl_command

ROOT = Path(__file__).resolve().parents[3]
AGENT = "tests.benchmarks.workload_agent:workload_agent"
#: short graceful stops, so a test waits seconds, not the defaults' half minute
SHUTDOWN_TIMEOUT_S = 5.0
RUNNER_GRACE_S = 2.0


def learner_config(path: Path, data_dir: Path) -> Path:
    """The learner with a tiny model built here, no engine, waiting for triplets that never come."""
    from agl_stream_trainer.models import build_tiny_model

    model = build_tiny_model(data_dir / "tiny-llama", seed=0)
    path.write_text(json.dumps({
        "run_id": "left-behind", "model": str(model), "engine": {"kind": "none"}, "optim": {"lr": 1e-3},
        "batcher": {"group_size": 2, "batch_groups": 1, "min_group_size": 2, "max_staleness": None},
        "checkpoint_dir": str(data_dir / "checkpoints"),
        "metrics": {"clickhouse": False, "progress": False, "jsonl": str(data_dir / "steps.jsonl")},
    }))  # fmt: skip
    return path


async def start(kinds: list[str], data_dir: Path) -> LocalStack:
    unknown = set(kinds) - {"runners", "front-door", "learner"}
    if unknown:
        raise SystemExit(f"unknown kinds {sorted(unknown)}")
    settings = Settings.from_env(data_dir=data_dir)
    stack = LocalStack(settings, log_dir=data_dir / "logs", processor_args=["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S)])
    settings = await stack.start()
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if "runners" in kinds:
        runners = stack.start_runners(AGENT, 2, env=env, extra_args=["--shutdown-grace", str(RUNNER_GRACE_S)])
        deadline = time.monotonic() + 120
        while len(psutil.Process(runners.pid).children()) < 2 and time.monotonic() < deadline:  # type: ignore[arg-type]
            await asyncio.sleep(0.2)
    if "front-door" in kinds:
        port = free_port()
        door = ServiceProcess("store", agl_command("ingest", "store", "--port", str(port), "--produce-timeout", "5"),
                              env={**stack.env(), **env}, log_path=data_dir / "logs" / "store.log").start()  # fmt: skip
        stack.services.append(door)
        if not wait_for_port("127.0.0.1", port, 120):
            raise RuntimeError(door.tail())
    if "learner" in kinds:
        config = learner_config(data_dir / "learner.json", data_dir)
        learner = ServiceProcess("learner", agl_command("trainer", "--config", str(config)),
                                 env={**stack.env(), **env, "HF_HUB_OFFLINE": "1"},
                                 log_path=data_dir / "logs" / "learner.log", cwd=ROOT).start()  # fmt: skip
        stack.services.append(learner)
        await asyncio.sleep(5.0)  # past its imports: it is loading the model and joining its group
        learner.check()
    return stack


def main() -> None:
    kinds, data_dir = [k for k in sys.argv[1].split(",") if k], Path(sys.argv[2])
    stack = asyncio.run(start(kinds, data_dir))
    me = psutil.Process()
    tree = [{"pid": p.pid, "cmdline": " ".join(p.cmdline())} for p in me.children(recursive=True)]
    print(json.dumps({"kinds": kinds, "broker": stack.broker.pid if stack.broker else None,
                      "broker_kind": stack.broker.kind if stack.broker else None, "tree": tree}), flush=True)
    time.sleep(3600)  # killed by the test


if __name__ == "__main__":
    main()
