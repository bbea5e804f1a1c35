"""A stop that always ends: SIGINT/SIGTERM start a graceful stop, and a deadline ends the process anyway.

A service's graceful stop waits on others (the broker to take a commit, ClickHouse to take a batch); with
those gone it could wait forever, and an orphan that never exits is what issue 32 found. So every service
arms a :class:`StopDeadline` when its stop begins. The deadline runs on its own thread, not the event
loop, so it fires even when the loop is stuck, and it exits with :attr:`ExitCode.STOP_TIMED_OUT`.
A second Ctrl-C (SIGINT) while stopping exits at once with :attr:`ExitCode.INTERRUPTED`. A repeated SIGTERM
does not: supervisors signal a whole process group and also forward the signal to their children, so a
child commonly gets the same stop request twice within milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Awaitable, Callable, Optional, TypeVar

from agl_stream.config import Settings, env_name
from agl_stream.service._exit import ExitCode
from agl_stream.service._kernel import arm_parent_death
from agl_stream.service._loop import run_on_service_loop

T = TypeVar("T")

#: what a stop may take beyond the service's own shutdown timeout before the deadline ends the process
#: (the time to cancel what is left, close clients and flush logs)
STOP_GRACE_S = 3.0
DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: "1" in a child's environment: its starter wants it to stop when its parent dies (see stop_with_parent)
STOP_WITH_PARENT_ENV = env_name("stop_with_parent")  # what a starter sets for its children


class StopDeadline:
    """Once armed, the process has ``timeout + grace`` seconds to exit on its own; then it exits anyway."""

    def __init__(self, timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S, *, name: str = "service",
                 grace: float = STOP_GRACE_S) -> None:  # fmt: skip
        self.timeout = timeout
        self.grace = grace
        self.name = name
        self._timer: Optional[threading.Timer] = None

    @property
    def bound(self) -> float:
        """Seconds from the start of the stop to the latest exit."""
        return self.timeout + self.grace

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def arm(self) -> None:
        """Start the clock (again a no-op once started: the first stop request sets the deadline)."""
        if self._timer is None:
            self._timer = threading.Timer(self.bound, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        # os.write, not logging: the logging machinery may hold a lock the stuck thread holds
        message = f"{self.name}: the graceful stop took longer than {self.bound:.0f} s; exiting with {int(ExitCode.STOP_TIMED_OUT)}\n"
        os.write(2, message.encode())
        os._exit(ExitCode.STOP_TIMED_OUT)


def stop_with_parent(deadline: StopDeadline, *, poll_s: float = 0.5, always: bool = False) -> bool:
    """Stop this process, within ``deadline``, when its parent dies, whoever installed the signal handlers.

    Only where a starter asked for it (``AGL_STOP_WITH_PARENT=1``, which :class:`ServiceProcess` sets for its
    children and so for their children), or ``always``: a service a person started from a shell must go on
    running under ``nohup`` when that shell exits. The kernel sends SIGTERM on the parent's death (armed
    here from inside, so it covers processes a framework starts, such as uvicorn's workers), and a watcher
    thread arms the deadline as soon as the parent is gone: the stop is bounded even where a framework's
    own handler took the signal. Returns whether it is armed."""
    if not (always or Settings.from_env().stop_with_parent):
        return False
    parent = os.getppid()
    if parent == 1 or not arm_parent_death(signal.SIGTERM):
        return False  # started by init (nobody to die with), or not Linux
    if os.getppid() != parent:  # the parent died before the request took effect
        deadline.arm()
        os.kill(os.getpid(), signal.SIGTERM)
        return True

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        deadline.arm()

    threading.Thread(target=watch, name="stop-with-parent", daemon=True).start()
    return True


class StopSignals:
    """SIGINT/SIGTERM to ``on_stop`` plus the deadline; a second SIGINT exits at once (see the module doc), or
    calls ``on_again`` where the service has a harder stop to offer first (the runner cancels its attempts).

    Use :meth:`install_on_loop` inside a running event loop, or :meth:`install` for a thread-based service
    (handlers then run on the main thread, between bytecodes). :attr:`received` is the first signal."""

    def __init__(self, on_stop: Callable[[], None], deadline: StopDeadline, *,
                 on_again: Optional[Callable[[], None]] = None) -> None:  # fmt: skip
        self.on_stop = on_stop
        self.on_again = on_again
        self.deadline = deadline
        self.received: Optional[int] = None

    def __call__(self, signum: int, _frame: object = None) -> None:
        if self.received is not None:
            if signum == signal.SIGINT:
                if self.on_again is not None:
                    self.on_again()
                    return
                os.write(2, f"{self.deadline.name}: Ctrl-C again while stopping; exiting now\n".encode())
                os._exit(ExitCode.INTERRUPTED)
            return  # the same stop request again (the group's signal and the parent's forwarded one)
        self.received = signum
        self.deadline.arm()
        self.on_stop()

    def install(self) -> None:
        """Handle the signals on the main thread, between two of its bytecodes, wherever it is.

        So ``on_stop`` must not take a lock the main thread may hold at that moment: ``threading.Event.set``
        while the main thread is inside that Event's ``wait`` deadlocks (the Event's lock is not reentrant).
        A thread-based service waits with :meth:`wait` instead, which holds no lock."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self)

    def wait(self, timeout: float, *, poll_s: float = 0.05) -> bool:
        """Whether a stop signal has arrived, waiting up to ``timeout`` seconds for one (main thread, after
        :meth:`install`). A signal interrupts the sleep and its handler only records it, so this answers
        within ``poll_s`` of the signal."""
        end = time.monotonic() + timeout
        while self.received is None:
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, poll_s))
        return True

    def install_on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self, sig)

    def uninstall_from_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


def run_until_signal(make: Callable[[asyncio.Event], Awaitable[T]], *, shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
                     name: str = "service") -> T:  # fmt: skip
    """Run ``make(stop_event)``: SIGINT/SIGTERM set the event for a graceful stop, bounded by a
    :class:`StopDeadline` of ``shutdown_timeout``."""
    deadline = StopDeadline(shutdown_timeout, name=name)
    stop_with_parent(deadline)

    async def runner() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = StopSignals(stop.set, deadline)
        signals.install_on_loop(loop)
        try:
            return await make(stop)
        finally:
            signals.uninstall_from_loop(loop)

    # the deadline stays armed after the loop ends: an exit held up by a non-daemon thread is still bounded
    return run_on_service_loop(runner)
