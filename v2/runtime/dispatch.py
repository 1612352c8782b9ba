"""`Dispatcher`: one thread that runs functions in the order they were posted, recording whatever they raise.
The runtime's done callbacks run on a shared one; each subscriber of a handle has its own (handles.py).
v2/runtime/handles.py re-exports it.
Must not know: handles, chunks, results, models, slots, scheduling.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable


class Dispatcher:
    """One thread that runs functions in the order they were posted. Whatever a function raises, any
    `BaseException` included, is recorded in `errors` and the thread goes on with the next."""

    def __init__(self, name: str = "v2-callbacks") -> None:
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.errors: list[str] = []
        self._thread.start()

    def post(self, fn: Callable[[], None]) -> None:
        self._queue.put(fn)

    def stop(self) -> None:
        """Run what is posted, then end the thread (without waiting for it)."""
        self._queue.put(None)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (returns at once when called from the thread itself)."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while (fn := self._queue.get()) is not None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - user code may raise SystemExit or KeyboardInterrupt
                self.errors.append(f"{type(e).__name__}: {e}")
