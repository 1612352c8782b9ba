"""Step graphs: one captured CUDA graph per bucket key, static buffers, replay, and the eager fallback.

Owns: `StepGraphs`, which runs a step function `fn(key)` that reads its inputs from static buffers
(allocated once at the largest bucket by the executor) and returns an output tensor. With CUDA and
graphs enabled, `capture()` warms every key up on a side stream and captures the keys largest first into
one shared memory pool; `run(key)` replays and returns a copy of the output (graph outputs are reused
buffers). `can_use_graph(key)` is the one predicate for graph or eager; each eager fallback is counted by
reason. Without CUDA the same static-buffer step runs eagerly: the CPU twin of the graph path.
Must not know: what the step computes, requests, scheduling.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Hashable, Iterable

import torch
from torch import Tensor


class GraphCaptureError(RuntimeError):
    """Capturing a step graph failed; the message says what to change."""


class StepGraphs:
    def __init__(self, name: str, fn: Callable[[tuple[int, ...]], Tensor], keys: Iterable[tuple[int, ...]], *,
                 device: torch.device, enabled: bool) -> None:
        self.name = name
        self.fn = fn
        self.keys = sorted(set(keys), reverse=True)  # largest first
        self.device = device
        self.enabled = enabled and device.type == "cuda"
        self.reason_off = "disabled" if not enabled else ("no_cuda" if device.type != "cuda" else "")
        self._graphs: dict[Hashable, tuple[torch.cuda.CUDAGraph, Tensor]] = {}
        self.fallbacks: Counter[str] = Counter()
        self.replays = 0

    def capture(self, warmup: int = 2) -> None:
        """Capture every key (largest first, one memory pool). A failure names the key and the remedies."""
        if not self.enabled:
            return
        with torch.cuda.device(self.device):
            # one pool for every key: only one graph's output is live at a time, since run() copies it out
            pool = torch.cuda.graph_pool_handle()
            for key in self.keys:
                try:
                    side = torch.cuda.Stream(self.device)
                    side.wait_stream(torch.cuda.current_stream(self.device))
                    with torch.cuda.stream(side):
                        for _ in range(warmup):
                            self.fn(key)
                    torch.cuda.current_stream(self.device).wait_stream(side)
                    graph = torch.cuda.CUDAGraph()
                    # thread_local: CUDA work of other threads (another runtime's engine) may go on meanwhile
                    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                        out = self.fn(key)
                    self._graphs[key] = (graph, out)
                except Exception as e:
                    raise GraphCaptureError(
                        f"{self.name}: capturing the graph for bucket {key} failed ({type(e).__name__}: {e}). "
                        "Out of memory: lower the card's largest batch bucket (or max_running / max_streams) or "
                        "free GPU memory. An operation that reads device values on the host cannot be captured: "
                        "keep it out of the step. Either way the runtime serves without graphs: "
                        "Runtime(..., graphs=False).") from e
            torch.cuda.synchronize(self.device)

    def can_use_graph(self, key: tuple[int, ...]) -> tuple[bool, str]:
        """Whether `key` replays a graph, and if not, why."""
        if not self.enabled:
            return False, self.reason_off
        if key not in self._graphs:
            return False, "not_captured" if key[0] <= self.keys[0][0] else "over_largest_bucket"
        return True, ""

    def run(self, key: tuple[int, ...]) -> Tensor:
        """Replay the graph for `key` (or run eagerly, counting why) -> the output, safe to keep."""
        ok, reason = self.can_use_graph(key)
        if not ok:
            self.fallbacks[reason] += 1
            return self.fn(key)
        graph, out = self._graphs[key]
        with torch.cuda.device(self.device):
            graph.replay()
        self.replays += 1
        return out.clone()

    def stats(self) -> dict[str, object]:
        return {"captured": len(self._graphs), "replays": self.replays, "eager_fallbacks": dict(self.fallbacks)}
