"""The device as the engine sees it: a stream of work, run in launch order, whose results are read later.

Owns: `Pending` (a result that may not be ready: reading it waits, and raises what the work raised) and
the streams. `launch(work)` queues one piece of device work (a callable that enqueues kernels and returns a
device tensor or None) and returns a `Pending` at once; `fetch(pendings)` starts copying their tensors to
the host and returns one `Pending` of host arrays (an exception in place of a failed launch's array; of a
`Kept` result, kept.py, only its host part is copied, the rest stays on the device);
`sync()` waits until everything launched has run. `depth` is how many launched steps the engine may leave
unread while it plans the next: 0 for a stream with nothing to overlap. Work runs in `torch.inference_mode()`:
no autograd or version bookkeeping on what it makes (on a CPU a fixed cost per operation that the tiny
operations of a frame feel); what a model keeps past a call it makes as normal tensors (v2/models/persist.py).
- `HostStream`: a CPU. Work runs at launch; depth 0, so the engine reads each step before planning the next.
- `CudaStream`: work runs at launch on the host thread and only enqueues kernels (graph replays, pinned
  non-blocking uploads); `fetch` copies into pinned buffers and records an event; only reading waits.
- `SimulatedStream`: the CPU twin of an asynchronous device for tests and benchmarks. Work runs on a worker
  thread in launch order; a step's results are ready `latency` seconds after the worker began the step's
  work (its device time), or when its work is done if that takes longer.
Also `to_device` / `upload`: the pinned, non-blocking host-to-device copies every executor uses.
Must not know: requests, loops, executors, scheduling.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Generic, Sequence, TypeVar

import numpy as np
import torch
from torch import Tensor

from v2.runtime.kept import Kept, split_kept

T = TypeVar("T")


class Pending(Generic[T]):
    """A result that may not be ready yet."""

    __slots__ = ("_event", "_value", "_error", "_wait")

    def __init__(self, value: Any = None, error: BaseException | None = None, *, ready: bool = True,
                 wait: Callable[[], None] | None = None) -> None:
        self._event = None if ready else threading.Event()
        self._value, self._error, self._wait = value, error, wait

    def set(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        assert self._event is not None
        self._event.set()

    @property
    def ready(self) -> bool:
        return self._event is None or self._event.is_set()

    @property
    def error(self) -> BaseException | None:
        """What the work raised (waits for it)."""
        self._block()
        return self._error

    def wait(self) -> T:
        self._block()
        if self._error is not None:
            raise self._error
        return self._value

    def outcome(self) -> Any:
        """The value, or what the work raised in its place (waits for it)."""
        self._block()
        return self._value if self._error is None else self._error

    def _block(self) -> None:
        if self._wait is not None:
            self._wait()
            self._wait = None
        if self._event is not None:
            self._event.wait()


_HALF = (torch.bfloat16, torch.float16)


def widened(t: Tensor) -> Tensor:
    """Half precision as float32 (numpy has no bfloat16)."""
    return t.float() if t.dtype in _HALF else t


def host_array(t: Tensor) -> np.ndarray:
    """A tensor's values on the host, as numpy (a host tensor's own memory, as `.cpu()` would give it)."""
    if t.dtype in _HALF:  # (`widened`, inline: one call less per result)
        t = t.float()
    return (t if t.is_cpu else t.cpu()).numpy()


def run_now(work: Callable[[], T]) -> Pending[T]:
    """Run `work` on this thread in inference mode; what it raises is read like a device error: at the result.
    The mode is torch's own guard, the one `torch.inference_mode()` enters, without that wrapper's Python calls
    (a fixed cost per launch that the engine's CPU step feels)."""
    try:
        with torch._C._InferenceMode(True):
            return Pending(work())
    except Exception as e:
        return Pending(error=e)


class HostStream:
    """A CPU: nothing is asynchronous, so nothing overlaps."""

    depth = 0

    def launch(self, work: Callable[[], T]) -> Pending[T]:
        return run_now(work)

    def fetch(self, pendings: Sequence[Pending[Tensor | None]]) -> Pending[list[Any]]:
        return Pending([_outcome(p, host_array) for p in pendings])

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


def _outcome(p: Pending[Tensor | None], convert: Callable[[Tensor], Any]) -> Any:
    value = p.outcome()
    return value if value is None or isinstance(value, BaseException) else split_kept(value, convert)


def _pinned_copy(t: Tensor) -> Tensor:
    """A device tensor's copy into pinned host memory, queued on the stream (valid once it has run)."""
    t = widened(t)
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    return host


class CudaStream:
    """The current CUDA stream of the engine thread: launches return once the kernels are queued. `depth` 0
    reads every step at once (the synchronous order, for comparisons)."""

    def __init__(self, device: torch.device, *, depth: int = 1) -> None:
        self.device, self.depth = device, depth

    def launch(self, work: Callable[[], T]) -> Pending[T]:
        return run_now(work)

    def fetch(self, pendings: Sequence[Pending[Tensor | None]]) -> Pending[list[Any]]:
        """Copies into pinned host memory, queued after the work; one event marks them done."""
        copies: list[Any] = []
        for p in pendings:
            if p.error is not None:
                copies.append(p.error)
                continue
            t = p.wait()
            copies.append(None if t is None else split_kept(t, _pinned_copy))  # a `Kept`: its host part alone
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        result = [split_kept(c, Tensor.numpy) if isinstance(c, (Tensor, Kept)) else c
                  for c in copies]  # views: valid once the event is
        return Pending(result, wait=event.synchronize)

    def sync(self) -> None:
        torch.cuda.current_stream(self.device).synchronize()

    def close(self) -> None:
        pass


COARSE_SLEEP_SLACK_S = 5e-4  # a timer sleep ends up to ~0.2 ms late on a busy host: sleep short of it


def _wait_until(deadline: float) -> None:
    """Return at `deadline` (to ~10 us): a timer sleep to shortly before it, then yields of the GIL (each
    `sleep(0)` lets the other threads run) until it passes. A device busy for D is ready at D, not at D plus
    the host's timer slack, which would otherwise count as the engine's time in every simulated period."""
    left = deadline - time.perf_counter()
    if left > COARSE_SLEEP_SLACK_S:
        time.sleep(left - COARSE_SLEEP_SLACK_S)
    while time.perf_counter() < deadline:
        time.sleep(0)


class SimulatedStream:
    """An asynchronous device made of a worker thread: launches return at once, work runs in order on the
    worker, and a step's results are ready `latency` seconds after the device began its work (the first
    piece of work it ran since the step before was fetched), as a GPU busy for `latency` with that step."""

    depth = 1

    def __init__(self, latency: float, *, threads: int | None = None) -> None:
        self.latency = latency
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._began: float | None = None  # when the worker began the step being run (worker thread only)
        self._worker = threading.Thread(target=self._run, args=(threads,), name="v2-device", daemon=True)
        self._worker.start()

    def _run(self, threads: int | None) -> None:
        if threads is not None:
            torch.set_num_threads(threads)
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, pending = item
            if self._began is None:
                self._began = time.perf_counter()
            try:
                with torch.inference_mode():
                    pending.set(work())
            except BaseException as e:  # the device's failure is the launcher's to read
                pending.set(error=e)

    def launch(self, work: Callable[[], T]) -> Pending[T]:
        pending: Pending[T] = Pending(ready=False)
        self._queue.put((work, pending))
        return pending

    def fetch(self, pendings: Sequence[Pending[Tensor | None]]) -> Pending[list[Any]]:
        def copy() -> list[Any]:
            began, self._began = self._began, None
            assert began is not None
            _wait_until(began + self.latency)  # the step's device time
            return [_outcome(p, host_array) for p in pendings]

        return self.launch(copy)

    def sync(self) -> None:
        def idle() -> None:  # what ran since the last fetch belongs to no step
            self._began = None

        self.launch(idle).wait()

    def close(self) -> None:
        """End the worker once the work already launched has run, and wait for it (from any other thread):
        work still queued at close (a state change queued after the last read, e.g. while requests are
        aborted) must not be left running inside torch when the interpreter finalizes. The engine thread
        closes its stream last, so a `Runtime.close` that joins the engine thread joins the worker too."""
        self._queue.put(None)
        if threading.current_thread() is not self._worker:
            self._worker.join()


Stream = HostStream | CudaStream | SimulatedStream


def default_stream(device: torch.device) -> Stream:
    return CudaStream(device) if device.type == "cuda" else HostStream()


def to_device(host: Tensor, device: torch.device) -> Tensor:
    """A host tensor on `device`; to CUDA through pinned memory without blocking the host (a pageable copy
    would wait for every kernel already queued, e.g. the step's frame graph)."""
    cuda = device.type == "cuda"
    return (host.pin_memory() if cuda else host).to(device, non_blocking=cuda)


def upload(host: Tensor, dst: Tensor) -> None:
    """Copy a host tensor into a device buffer (a static graph input) without blocking the host."""
    cuda = dst.device.type == "cuda"
    dst.copy_(host.pin_memory() if cuda else host, non_blocking=cuda)
