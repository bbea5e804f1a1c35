"""One attempt's process, for real: exit statuses, input delivery, limits, timeout, capped output, and nothing
of its tree left running at the end, whichever way it ended."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from agl_stream_controller import Limits, failure_reason, run_command

PY = sys.executable


def script(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


def env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), **extra}


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


async def test_exit_statuses_map_to_outcomes(tmp_path: Path) -> None:
    ok = await run_command(script("print('hi')"), env=env(), log_path=tmp_path / "ok.log")
    assert ok.returncode == 0 and failure_reason(ok, Limits()) is None
    assert (tmp_path / "ok.log").read_text() == "hi\n" and ok.log_bytes == 3
    bad = await run_command(script("import sys; sys.exit(3)"), env=env(), log_path=tmp_path / "bad.log")
    assert failure_reason(bad, Limits()) == "exit code 3"
    killed = await run_command(script("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"), env=env(),
                               log_path=tmp_path / "segv.log")  # fmt: skip
    assert failure_reason(killed, Limits()) == "killed by SIGSEGV"


async def test_the_task_arrives_by_stdin_and_argv_is_never_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / "never-created"
    argv = script("import sys, json; print(json.dumps({'stdin': json.load(sys.stdin), 'argv': sys.argv[1:]}))")
    argv += [f"; touch {marker}", "$(touch x)"]
    result = await run_command(argv, env=env(), log_path=tmp_path / "o.log", stdin_data=b'{"q": 1}')
    assert result.returncode == 0
    out = json.loads((tmp_path / "o.log").read_text())
    assert out == {"stdin": {"q": 1}, "argv": [f"; touch {marker}", "$(touch x)"]}
    assert not marker.exists()


async def test_a_timeout_stops_the_group_grandchildren_included(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    argv = script(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pids)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """)
    limits = Limits(timeout_seconds=1.5, kill_grace_seconds=1.0)
    started = time.monotonic()
    result = await run_command(argv, env=env(), log_path=tmp_path / "o.log", limits=limits)
    assert result.timed_out and time.monotonic() - started < 10
    assert failure_reason(result, limits) == "timeout: still running after 1.5 s; its process group was stopped"
    assert gone(int(pids.read_text()))


async def test_what_outlives_the_leader_is_killed_even_outside_its_group(tmp_path: Path) -> None:
    """A daemon-like grandchild (its own session, so not in the group) and one left in the group: both found."""
    pids = tmp_path / "pids"
    argv = script(f"""
        import os, subprocess, sys, time
        stay = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        escape = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open({str(pids)!r}, "w").write(f"{{stay.pid}} {{escape.pid}}")
        time.sleep(1.0)  # the controller notes its tree meanwhile
    """)
    result = await run_command(argv, env=env(), log_path=tmp_path / "o.log")
    assert result.returncode == 0 and result.leftovers_killed == 2
    assert all(gone(int(pid)) for pid in pids.read_text().split())


async def test_cancelling_the_attempt_kills_its_tree(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    argv = script(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(600)
    """)
    task = asyncio.create_task(run_command(argv, env=env(), log_path=tmp_path / "o.log"))
    while not pids.exists() or len(pids.read_text().split()) < 2:
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all(gone(int(pid)) for pid in pids.read_text().split())


async def test_cpu_memory_and_open_file_limits_hold(tmp_path: Path) -> None:
    cpu = Limits(cpu_seconds=1)
    spin = await run_command(script("while True: pass"), env=env(), log_path=tmp_path / "cpu.log", limits=cpu)
    assert failure_reason(spin, cpu) == "cpu limit: SIGXCPU after 1 CPU seconds"

    memory = Limits(memory_bytes=300 << 20)
    hog = await run_command(script("x = bytearray(600 << 20)"), env=env(), log_path=tmp_path / "mem.log", limits=memory)
    assert hog.returncode == 1 and "MemoryError" in (tmp_path / "mem.log").read_text()

    files = Limits(open_files=16)
    opener = await run_command(script("handles = [open('/dev/null') for _ in range(64)]"), env=env(),
                               log_path=tmp_path / "files.log", limits=files)  # fmt: skip
    assert opener.returncode == 1 and "Too many open files" in (tmp_path / "files.log").read_text()


async def test_output_past_the_cap_keeps_its_head_and_tail(tmp_path: Path) -> None:
    argv = script("import sys; sys.stdout.write('A' * 3000 + 'B' * 10000 + 'C' * 3000)")
    result = await run_command(argv, env=env(), log_path=tmp_path / "o.log", log_cap_bytes=4096)
    text = (tmp_path / "o.log").read_text()
    assert result.log_bytes == 16000 and result.log_dropped_bytes == 16000 - 4096
    assert text.startswith("A" * 2048) and text.endswith("C" * 2048)
    assert f"[agl-stream controller: {16000 - 4096} bytes of output left out here]" in text


def test_a_controller_killed_mid_attempt_takes_the_whole_tree_with_it(tmp_path: Path) -> None:
    """SIGKILL leaves no clean-up code to run: the shepherd hears of it from the kernel and kills what the
    command started, in its group or not."""
    import signal
    import subprocess

    pids = tmp_path / "pids"
    agent = textwrap.dedent(f"""
        import os, subprocess, sys, time
        stay = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        escape = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{stay.pid}} {{escape.pid}}")
        time.sleep(600)
    """)
    controller = textwrap.dedent(f"""
        import asyncio, os, sys
        from pathlib import Path
        from agl_stream_controller import run_command
        asyncio.run(run_command([sys.executable, "-c", {agent!r}], env=dict(os.environ), log_path=Path({str(tmp_path / "o.log")!r})))
    """)
    proc = subprocess.Popen([PY, "-c", controller], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        deadline = time.monotonic() + 30
        while not pids.exists() or len(pids.read_text().split()) < 3:
            assert time.monotonic() < deadline and proc.poll() is None, "the agent did not start"
            time.sleep(0.05)
        shepherd = psutil.Process(int(pids.read_text().split()[0])).ppid()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert all(gone(int(pid)) for pid in pids.read_text().split()) and gone(shepherd)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_killed_controller_takes_down_a_command_that_keeps_forking(tmp_path: Path) -> None:
    """A process of the tree may fork between the shepherd's listing of the tree and its kill: the orphan that
    fork leaves is re-parented to the shepherd, which keeps killing until none is left (the stop-45 CI failure:
    an agent's helper, started just as the controller died, outlived it)."""
    import signal
    import subprocess
    import uuid

    mark = uuid.uuid4().hex
    started = tmp_path / "started"
    agent = textwrap.dedent(f"""
        import os, time
        open({str(started)!r}, "w").write("yes")
        while True:  # a child every few milliseconds, each one sleeping
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
            time.sleep(0.002)
    """)
    controller = textwrap.dedent(f"""
        import asyncio, os, sys
        from pathlib import Path
        from agl_stream_controller import run_command
        asyncio.run(run_command([sys.executable, "-c", {agent!r}], env=dict(os.environ), log_path=Path({str(tmp_path / "o.log")!r})))
    """)
    env_ = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "AGL_TEST_FORK_MARK": mark}

    def marked() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("AGL_TEST_FORK_MARK") == mark and proc.pid != controller_proc.pid \
                        and proc.status() != psutil.STATUS_ZOMBIE:  # fmt: skip
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    controller_proc = subprocess.Popen([PY, "-c", controller], env=env_)
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert time.monotonic() < deadline and controller_proc.poll() is None, "the agent did not start"
            time.sleep(0.05)
        time.sleep(0.5)  # a tree of a few hundred sleeping children, still growing
        assert len(marked()) > 10
        controller_proc.send_signal(signal.SIGKILL)
        controller_proc.wait(10)
        deadline = time.monotonic() + 15
        while (left := marked()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"{len(left)} processes of the killed controller's command still alive"
    finally:
        if controller_proc.poll() is None:
            controller_proc.kill()
        for proc in marked():
            proc.kill()
