"""The user's command as a :class:`~agl_stream.litagent.LitAgent`: the runner claims, heartbeats and reports each
attempt as it does for any agent; this runs the command for it.

What the command gets (never through a shell):
- the model, scoped to the attempt: ``OPENAI_BASE_URL`` is the proxy's
  ``/rollout/{rollout_id}/attempt/{attempt_id}/v1``, and upstream v1.0's ``AGL_OPENAI_BASE_URL`` its
  ``/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{train|val}/openai/v1``, so every call it makes is
  recorded as the attempt's span; ``ANTHROPIC_BASE_URL`` is the same prefix for the Anthropic SDK (its Messages
  API, served by the proxy); ``AGL_EVENT_URL`` takes v1.0's events (``{"event_type": "reward", "data":
  {"value": r}}``); ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` / ``AGL_KEY`` is the attempt's own key when ``AGL_ATTEMPT_KEY_SECRET`` is
  set (it writes only this attempt, and stops working when the attempt finishes), else the front doors'
  token (a placeholder when none is set: SDKs insist on a key);
- the task: its ``env_map`` variables, the task file (``AGL_TASK_FILE``), its stdin if asked;
- ``AGL_ROLLOUT_ID``, ``AGL_ATTEMPT_ID``, ``AGL_ROLLOUT_MODE``, and ``AGL_REWARD_FILE``: a file the command may
  write its reward to (a number, or upstream v1.0's ``{"value": r}``).

Exit 0 is success, anything else a failure with its reason (:mod:`.outcome`); the rollout's
``RolloutConfig`` decides the retry. The output is kept under the logs folder, capped, and its path is on
the attempt's annotation span (``agl.controller.process.*`` attributes), beside the exit status, duration and CPU time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from agl_stream.emitter import emit_annotation
from agl_stream.litagent import LitAgent
from agl_stream.service import mint_attempt_key
from agl_stream.types import NamedResources, Rollout
from agl_stream_controller.kubernetes import JobLauncher
from agl_stream_controller.launch import ProcessResult, run_command
from agl_stream_controller.outcome import failure_reason
from agl_stream_controller.spec import CommandSpec, Limits, mapped_env, rendered_argv, task_document

#: the attributes of the attempt's annotation that describes its process
PROCESS_SPAN_PREFIX = "agl.controller.process"
#: what an agent's SDK gets as its key when the front doors have no token (they accept any then)
KEY_PLACEHOLDER = "agl-stream"


class CommandFailed(RuntimeError):
    """The command ended otherwise than exit 0 in time; the message says how."""


class RewardUnreadable(ValueError):
    """The reward file holds something that is not a reward."""


class CommandAgent(LitAgent[Any]):
    """Runs ``spec`` once per attempt (see the module doc)."""

    needs_resources = False

    def __init__(self, spec: CommandSpec, *, proxy_url: str, logs_dir: Path, key: Optional[str] = None,
                 key_secret: Optional[str] = None, inherit_env: bool = True,
                 jobs: Optional[JobLauncher] = None) -> None:  # fmt: skip
        """``jobs``: run each attempt as a Kubernetes Job (:mod:`.kubernetes`) instead of a local process."""
        super().__init__()
        self.jobs = jobs
        self.spec = spec
        self.proxy_url = proxy_url.rstrip("/")
        self.logs_dir = logs_dir
        self.key = key or KEY_PLACEHOLDER
        self.key_secret = key_secret
        self.inherit_env = inherit_env

    def is_async(self) -> bool:
        return True

    async def rollout_async(self, task: Any, resources: NamedResources, rollout: Rollout) -> Optional[float]:
        attempt_id = _attempt_id(rollout)
        folder = self.logs_dir / rollout.rollout_id / attempt_id
        folder.mkdir(parents=True, exist_ok=True)
        document = task_document(task, rollout_id=rollout.rollout_id, attempt_id=attempt_id, mode=rollout.mode)
        env = self.environment(rollout.rollout_id, attempt_id, rollout.mode, folder, document)
        argv = rendered_argv(self.spec.argv, document) if self.spec.input.argv_template else self.spec.argv
        if self.jobs is not None:
            result = await self.jobs.run(rollout_id=rollout.rollout_id, attempt_id=attempt_id, env=env,
                                         log_path=folder / "output.log", timeout_seconds=self.spec.limits.timeout_seconds,
                                         argv=argv, memory_bytes=self.spec.limits.memory_bytes,
                                         log_cap_bytes=self.spec.log_cap_bytes)  # fmt: skip
        else:
            stdin = json.dumps(document).encode() if self.spec.input.stdin else None
            result = await run_command(argv, env=env, log_path=folder / "output.log", limits=self.spec.limits,
                                       stdin_data=stdin, cwd=self.spec.cwd, log_cap_bytes=self.spec.log_cap_bytes)  # fmt: skip
        reason = failure_reason(result, self.spec.limits)
        _record_process(result, reason)
        if reason is not None:
            raise CommandFailed(f"{reason} (output: {result.log_path})")
        if self.jobs is not None:
            return None  # a pod reports to AGL_EVENT_URL
        if self.spec.check is not None:
            return await self._check(env, folder, result.log_path)
        return read_reward(folder / "reward")

    async def _check(self, env: dict[str, str], folder: Path, output: Path) -> Optional[float]:
        """The check command's verdict on the agent's work: the reward it wrote, else its last line; None if neither."""
        assert self.spec.check is not None
        limits = Limits(timeout_seconds=self.spec.check_timeout_seconds)
        result = await run_command(self.spec.check, env={**env, "AGL_OUTPUT_FILE": str(output)},
                                   log_path=folder / "check.log", limits=limits, cwd=self.spec.cwd,
                                   log_cap_bytes=self.spec.log_cap_bytes)  # fmt: skip
        reason = failure_reason(result, limits)
        if reason is not None:
            raise CommandFailed(f"check failed: {reason} (output: {result.log_path})")
        reward = read_reward(folder / "reward")
        if reward is not None:
            return reward
        lines = result.log_path.read_text(errors="replace").strip().splitlines()
        if not lines:
            return None
        try:
            return float(lines[-1])
        except ValueError:
            raise RewardUnreadable(f"the check wrote no reward file and its last line is not a number: "
                                   f"{lines[-1][:80]!r} ({result.log_path})") from None

    def environment(self, rollout_id: str, attempt_id: str, mode: Optional[str], folder: Path,
                    document: dict[str, Any]) -> dict[str, str]:  # fmt: skip
        """The command's variables for one attempt (later entries win: the attempt's own last)."""
        base = f"{self.proxy_url}/rollout/{rollout_id}/attempt/{attempt_id}/v1"
        v1_mode = "train" if mode == "train" else "val"  # upstream v1.0's two route modes
        v1_base = f"{self.proxy_url}/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{v1_mode}/openai/v1"
        if self.jobs is not None:  # a pod: only the attempt's variables (never the controller's own), no shared disk
            env = dict(self.spec.env)
            env.update(mapped_env(self.spec.input.env_map, document))
            env["AGL_TASK_JSON"] = json.dumps(document)
        else:
            env = dict(os.environ) if self.inherit_env else {"PATH": os.environ.get("PATH", "")}
            env.update(self.spec.env)
            env.update(mapped_env(self.spec.input.env_map, document))
        if self.spec.input.json_file_env and self.jobs is None:
            task_file = folder / "task.json"
            task_file.write_text(json.dumps(document))
            env[self.spec.input.json_file_env] = str(task_file)
        key = mint_attempt_key(self.key_secret, rollout_id, attempt_id) if self.key_secret else self.key
        env.update({
            "OPENAI_BASE_URL": base, "OPENAI_API_KEY": key, "AGL_OPENAI_BASE_URL": v1_base, "AGL_KEY": key,
            # the Anthropic SDK appends /v1/messages to its base URL (the proxy serves that API, see .dialects)
            "ANTHROPIC_BASE_URL": base.removesuffix("/v1"), "ANTHROPIC_API_KEY": key,
            "AGL_EVENT_URL": f"{self.proxy_url}/api/rollouts/{rollout_id}/attempt/{attempt_id}/events",
            "AGL_ROLLOUT_ID": rollout_id, "AGL_ATTEMPT_ID": attempt_id, "AGL_ROLLOUT_MODE": mode or "",
        })  # fmt: skip
        if self.jobs is None:
            env["AGL_REWARD_FILE"] = str(folder / "reward")
        return env


def read_reward(path: Path) -> Optional[float]:
    """The reward the command wrote (a number, or ``{"value": r}``); None when it wrote none."""
    if not path.exists():
        return None
    text = path.read_text().strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise RewardUnreadable(f"{path}: not a number or JSON: {text[:80]!r}") from None
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RewardUnreadable(f'{path}: a reward is a number or {{"value": <number>}}, not {text[:80]!r}')
    return float(value)


def _attempt_id(rollout: Rollout) -> str:
    attempt = getattr(rollout, "attempt", None)
    if attempt is None:
        raise TypeError("the controller runs attempts: the runner hands it the rollout with its attempt")
    return str(attempt.attempt_id)


def _record_process(result: ProcessResult, reason: Optional[str]) -> None:
    """The process's end as an annotation span of the attempt: where its output is, how it ended."""
    fields = {
        "log_path": str(result.log_path), "returncode": result.returncode, "timed_out": result.timed_out,
        "duration_seconds": round(result.duration_seconds, 3), "cpu_seconds": result.cpu_seconds,
        "log_bytes": result.log_bytes, "log_dropped_bytes": result.log_dropped_bytes,
        "leftovers_killed": result.leftovers_killed, "failure": reason,
    }  # fmt: skip
    emit_annotation({f"{PROCESS_SPAN_PREFIX}.{k}": v for k, v in fields.items() if v is not None})
