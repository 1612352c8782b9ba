"""A hold for tests that must act while a request is still at a known point of its life: the engine waits in a
loop's `advance` until the test releases it, so no host is too fast for the test's next step.

Must not know: any family (the loop is given).
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import pytest


class Hold:
    """Holds the engine inside a loop's `advance` (after the real one ran) once `when(state)` is true, until
    `release()`: what the test does meanwhile (a cancel, more submits) happens before the request can get past
    that point, however fast the host makes frames. `reached` is set while it holds; call `release` in a `finally`
    (past `timeout` a hold never released lets go for good)."""

    def __init__(self, loop: object, monkeypatch: pytest.MonkeyPatch, when: Callable[[object], bool],
                 timeout: float = 60.0) -> None:
        self.reached, self.released = threading.Event(), threading.Event()
        real = loop.advance  # type: ignore[attr-defined]

        def advance(state: object, plan: object, row: object) -> bool:
            taken = real(state, plan, row)
            if not self.released.is_set() and when(state):
                self.reached.set()
                if not self.released.wait(timeout):
                    self.released.set()  # never released: it lets go for good (the test's check then fails)
            return bool(taken)

        monkeypatch.setattr(loop, "advance", advance)

    def wait(self, timeout: float = 120.0) -> None:
        """Until the engine is held (a hang check past `timeout`)."""
        assert self.reached.wait(timeout), "the hold was never reached"

    def release(self) -> None:
        self.released.set()


def slow_frames(loop: object, monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Each row a loop's `advance` takes sleeps `seconds` first: N frames take at least N * `seconds` however
    fast the host is (a lower bound for a test whose other side must act before they are done)."""
    real = loop.advance  # type: ignore[attr-defined]

    def advance(state: object, plan: object, row: object) -> bool:
        time.sleep(seconds)
        return bool(real(state, plan, row))

    monkeypatch.setattr(loop, "advance", advance)


def expiry_after_first_frame(requests: object, loop: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's deadline and idle checks (`requests.expire`) skipped until `loop` has made a frame: a slow
    host's admission and prefill cannot use up an idle timeout before the first sentence is spoken."""
    spoke = threading.Event()
    real_expire, real_advance = requests.expire, loop.advance  # type: ignore[attr-defined]

    def advance(state: object, plan: object, row: object) -> bool:
        taken = real_advance(state, plan, row)
        if state.codes:  # type: ignore[attr-defined]
            spoke.set()
        return bool(taken)

    monkeypatch.setattr(loop, "advance", advance)
    monkeypatch.setattr(requests, "expire", lambda: real_expire() if spoke.is_set() else None)
