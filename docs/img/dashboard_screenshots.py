"""Screenshots of ``agl-stream dashboard`` during a real training run, for the docs (``make screenshots``).

Runs the demo's GRPO job (``examples/demo.py``'s configuration: the calculator agent, the embedded
inference server, the learner publishing weights every step) through ``Trainer.fit`` on a fresh
data directory, then serves ``agl-stream dashboard`` on what the run wrote, opens it in headless
Chromium (Debian's ``chromium``) and saves:

* ``dashboard-overview.png`` - the run overview and rewards,
* ``dashboard-rewards.png``  - held-out accuracy (and pass@k) per policy version, rewards,
* ``dashboard-training.png`` - the learner's steps,
* ``dashboard-rollout.png``  - one rollout: attempts, span tree with attributes, triplets.

``--model tiny`` (default; a random tiny Llama, minutes) or ``smollm2`` (the demo's model, slower,
rewards that move). Nothing here is staged: every number is what the run wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agl_stream.config import Settings  # noqa: E402
from agl_stream.trainer import Trainer  # noqa: E402
from examples.demo import AGENT, load, trainer_config  # noqa: E402

SHOTS = {  # file -> (view, window height)
    "dashboard-overview.png": ("#/overview", 1400),
    "dashboard-rewards.png": ("#/rewards", 1000),
    "dashboard-training.png": ("#/training", 1300),
    "dashboard-rollout.png": ("#/rollout/{rollout_id}", 1140),
}


def chromium_screenshot(url: str, path: Path, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}", "--hide-scrollbars",
                "--force-device-scale-factor=1", f"--window-size=1440,{height}", "--virtual-time-budget=15000",
                f"--screenshot={path}", url]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    if done.returncode != 0 or not path.exists():
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")


def dashboard_url(log: Path, timeout: float = 600) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists():
            found = re.search(r"agl-stream dashboard: (\S+)", log.read_text(errors="replace"))
            if found:
                return found.group(1)
        time.sleep(0.5)
    raise TimeoutError(f"no dashboard URL in {log}")


def panel(http: httpx.Client, name: str, **params: Any) -> list[dict[str, Any]]:
    answer = http.get("/api/panels", params={"names": name, "from": 0, **params}).json()["panels"][name]
    return [dict(zip(answer["columns"], row)) for row in answer.get("rows", [])]


def pick_rollout(http: httpx.Client) -> Optional[str]:
    """A finished rollout with triplets and the most spans (the richest span tree), training ones first
    (the newest rollouts of a finished run are its final evaluation's)."""
    candidates = [r for r in panel(http, "recent_rollouts") if r["status"] == "succeeded" and r["final_reward"] is not None
                  and (r["spans"] or 0) > 1]  # fmt: skip
    best = max(candidates, key=lambda r: (r["mode"] == "train", r["spans"], r["final_reward"]), default=None)
    return best["rollout_id"] if best else None


def train(data_dir: Path, model: str, steps: int) -> None:
    shutil.rmtree(data_dir, ignore_errors=True)
    settings = Settings.from_env(env={}, data_dir=data_dir, partitions=2, kafka_session_timeout_ms=6000)
    from agl_stream_trainer.rl import RL

    trainer = Trainer(RL(trainer_config(steps, model, seed=0), output_dir=data_dir / "run", eval_timeout=600, eval_samples=2),
                      n_runners=1, runner_concurrency=16, settings=settings)  # fmt: skip
    report = trainer.fit(AGENT, load("train"), load("val", 16))
    print(json.dumps({"steps": report.get("steps"), "policy_version": report.get("policy_version")}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", choices=("tiny", "smollm2"))
    parser.add_argument("--steps", type=int, default=12, help="learner steps of the run")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".agl" / "screenshots")
    parser.add_argument("--no-run", action="store_true", help="photograph what an earlier run of this script left in --data-dir")
    args = parser.parse_args()
    if shutil.which("chromium") is None:
        print("error: Debian's chromium is needed (apt-get install -y chromium)", file=sys.stderr)
        return 2
    if not args.no_run:
        train(args.data_dir, args.model, args.steps)
    # The run is over and its engine idle: the dashboard opens it directly (during a run it reads
    # through the processors' SQL door, as tests/processors/dashboard/test_live_run.py shows).
    token = secrets.token_urlsafe(12)
    log = args.data_dir / "logs" / "dashboard-screenshots.log"
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-m", "agl_stream.cli.main", "dashboard", "--port", "0"], cwd=ROOT,
                                  env={**os.environ, "AGL_DATA_DIR": str(args.data_dir), "AGL_DASHBOARD_TOKEN": token},
                                  stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        url = dashboard_url(log, timeout=120)
        base = url.split("/?token=")[0]
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            rollout_id = pick_rollout(http)
        if rollout_id is None:
            raise RuntimeError("no finished training rollout with spans and triplets to show")
        args.out.mkdir(parents=True, exist_ok=True)
        for name, (view, height) in SHOTS.items():
            chromium_screenshot(f"{url}{view.format(rollout_id=rollout_id)}", args.out / name, height)
            print(f"wrote {args.out / name}", flush=True)
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
