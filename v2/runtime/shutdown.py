"""Interpreter exit with runtimes still open: each is closed (its requests aborted, its threads joined)
before the interpreter finalizes.

Owns: the set of open runtimes (weak: a closed runtime that nobody holds is freed) and one `atexit` hook.
Why: the engine thread is a daemon thread that spends its time inside torch. At finalization Python stops
daemon threads where they stand: a thread inside a C++ frame is unwound through `noexcept` code and the
process dies in `std::terminate` (SIGABRT, "terminate called without an active exception") whatever exit
status Python meant to give. `threading` joins only non-daemon threads, and then `atexit` hooks run (in
the reverse order of registration: this one, registered after torch is imported, runs before torch's),
so the hook ends every engine and dispatcher thread while torch is still whole, and the process exits with
Python's own status. A runtime whose threads do not end within `EXIT_TIMEOUT_S` (a done callback that
never returns) is left to the interpreter.
Must not know: steps, requests, how `close()` works.
"""

from __future__ import annotations

import atexit
import time
import weakref
from typing import Protocol


class Closable(Protocol):
    def close(self, *, drain: bool = False, timeout: float | None = None) -> None: ...


EXIT_TIMEOUT_S = 5.0  # all open runtimes together, at interpreter exit

_open: weakref.WeakSet[Closable] = weakref.WeakSet()


def track(runtime: Closable) -> None:
    """Close `runtime` (abort what runs, join its threads) at interpreter exit unless it is closed first."""
    _open.add(runtime)


def close_open_runtimes(timeout: float = EXIT_TIMEOUT_S) -> None:
    """Close every tracked runtime, aborting its requests, within `timeout` seconds in all."""
    deadline = time.monotonic() + timeout
    for runtime in list(_open):
        try:
            runtime.close(drain=False, timeout=max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - one runtime's failure to close must not keep the others open
            pass


atexit.register(close_open_runtimes)
