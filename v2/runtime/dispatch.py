"""`Dispatcher`: one thread that runs functions in the order they were posted, recording whatever they raise.
The runtime's done callbacks run on a shared one; each subscriber of a handle has its own, a `lane` of that one
(handles.py), so joining the shared one (`Runtime.close`) waits for the subscribers' threads too.
v2/runtime/handles.py re-exports it.
Must not know: handles, chunks, results, models, slots, scheduling.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Callable


class Dispatcher:
    """One thread that runs functions in the order they were posted. Whatever a function raises, any
    `BaseException` included, is recorded in `errors` and the thread goes on with the next."""

    def __init__(self, name: str = "v2-callbacks") -> None:
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.errors: list[str] = []
        self._lanes: weakref.WeakSet[Dispatcher] = weakref.WeakSet()  # a running lane is held by its thread
        self._lanes_lock = threading.Lock()  # lanes are made on any thread
        self._thread.start()

    def lane(self, name: str) -> "Dispatcher":
        """A dispatcher with its own thread (e.g. a subscriber's) that `join` waits for as well."""
        lane = Dispatcher(name)
        with self._lanes_lock:
            self._lanes.add(lane)
        return lane

    def post(self, fn: Callable[[], None]) -> None:
        self._queue.put(fn)

    def stop(self) -> None:
        """Run what is posted, then end the thread (without waiting for it)."""
        self._queue.put(None)

    def join(self, timeout: float | None = None) -> None:
        """Wait up to `timeout` in all for the thread and then its lanes' to end. Called from the thread or one
        of its lanes (a callback closing the runtime), it waits for none of them: two callbacks that each close
        would otherwise wait for each other."""
        me = threading.current_thread()
        with self._lanes_lock:
            if me is self._thread or any(me is lane._thread for lane in self._lanes):
                return
        deadline = None if timeout is None else time.monotonic() + timeout
        left = lambda: None if deadline is None else max(0.0, deadline - time.monotonic())  # noqa: E731
        self._thread.join(left())
        with self._lanes_lock:  # (after the thread: a lane made by what it ran is joined too)
            lanes = list(self._lanes)
        for lane in lanes:
            lane._thread.join(left())

    def _run(self) -> None:
        while (fn := self._queue.get()) is not None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - user code may raise SystemExit or KeyboardInterrupt
                self.errors.append(f"{type(e).__name__}: {e}")
