"""What every bound family with one paged AR loop and an optional codec chunk loop wires and does the same way.

Owns: `PagedFamily`, a base of such a family's bound object (a `v2.runtime.family.Family`), over what the
family sets first: `card`, `device`, `sample_rate`, its frame executor `frames` (a `PagedFrames`), its codec
loop and executor `codec_loop` / `codec_exec` (None: the card declares no codec loop, so no audio) and
`_launch`. It gives the wiring: `declared_graph` (the graph the card declares: the AR loop holds the paged KV
and a "kv" slot, the codec loop a "codec" slot and makes the caller's audio, the front loop uses the
"encode" pool) and `paged_limits` (the KV pool's spec and the queue limits from the AR loop's settings);
and the steps of a request's life that follow from these alone: `paged_kv` (the AR loop's pool, the family's
`kv_ops` and `recompute_rows`), `bind` (the engine's stream), `thread_setup`,
`front_start` (nothing to reset), `needs` (a KV slot, a codec slot when the request decodes audio, KV rows
for its prompt and frame cap), `with_codec` (the codec loop's state next to the AR loop's at admission),
`admit_codec` (fresh codec state for its stream), `check_group_size` (a group's size against the slots)
and `stats` (the step graphs'). Also `pool_blocks` (the KV pool's size in blocks from the AR loop's
settings) and `graph_stats`. What it reads of a request's record: `request.decode_audio`,
`work.max_frames`, `rows`, `slots`, `id`.
Must not know: any family's model, request, prompt layout or sampling.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Hashable, Mapping, Sequence

import torch

from v2.contracts import LoopState
from v2.kit.chunk_executor import ChunkExecutor
from v2.kit.chunks import ChunkLoop
from v2.runtime.family import (
    AnyFrontLoop, AnyLoop, AnyPagedLoop, KVOps, KVSpec, LaunchState, LoopGraph, Needs, PagedKV,
)
from v2.kit.frames import PagedFrames


def pool_blocks(settings: Any, device: torch.device, block_bytes: int, *, advice: str = "") -> int:
    """The KV pool's size in blocks from the AR loop's settings (`kv_blocks`, `kv_memory_fraction`, `max_running`,
    `max_blocks`): `kv_blocks`; or `kv_memory_fraction` of the memory free on `device` now (CUDA:
    `mem_get_info`; a CPU: the host's available memory) in blocks of `block_bytes`; else max_running requests
    at full length. `advice`: what the refusal of a fraction too small adds."""
    if settings.kv_blocks is not None:
        return int(settings.kv_blocks)
    if settings.kv_memory_fraction is None:
        return int(settings.max_running * settings.max_blocks)
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    blocks = int(free * settings.kv_memory_fraction) // block_bytes
    if blocks < settings.max_blocks:
        raise RuntimeError(f"kv_memory_fraction: {settings.kv_memory_fraction} of {free / 2**30:.1f} GiB free holds "
                           f"{blocks} KV blocks, fewer than one request at full length ({settings.max_blocks}){advice}")
    return blocks


def graph_stats(frames: Any, codec: Any | None) -> dict[str, Any]:
    """The step graphs' counts: the frame executor's, and the codec executor's where there is one."""
    graphs = {"ar_frame": frames.graphs.stats()}
    if codec is not None:
        graphs["audio_chunk"] = codec.graphs.stats()
    return {"graphs": graphs}


class PagedFamily:
    """The base of a bound family whose card declares one paged AR loop, optionally feeding a codec chunk loop;
    the family sets the attributes below before it wires."""

    card: Any
    device: torch.device
    sample_rate: int
    frames: PagedFrames
    codec_loop: ChunkLoop | None
    codec_exec: ChunkExecutor | None
    graph: LoopGraph
    kv: KVSpec
    kv_ops: KVOps
    prefill_budget: int
    max_waiting: int
    max_group: int
    max_buffered_chunks: int
    _launch: LaunchState
    recompute_rows: Callable[[LoopState], torch.Tensor]  # the rows a resumed request recomputes (its layout)

    # ----- wiring ---------------------------------------------------------------------------------
    def declared_graph(self, paged: Hashable, loop: AnyPagedLoop, front: AnyFrontLoop | None,
                       names: Callable[[str], Hashable] = lambda name: name) -> LoopGraph:
        """The graph the card declares (`card.loops.driven()`, its names mapped by `names`): the AR loop `paged`
        holding the paged KV ("kv" pool) and the codec loop, where there is one ("codec" pool: its chunks
        are the caller's audio), `front` before admission ("encode" pool)."""
        loops: dict[Hashable, AnyLoop] = {paged: loop}
        pools: dict[Hashable, tuple[str, ...]] = {paged: ("kv",)}
        audio: Hashable | None = None
        if self.codec_loop is not None:
            audio = self.codec_loop.kind
            loops[audio], pools[audio] = self.codec_loop, ("codec",)
        edges = [(names(name), [names(t) for t in decl.feeds]) for name, decl in self.card.loops.driven()]
        return LoopGraph.declared(edges, loops, pools, paged=paged, audio=audio, front=front, front_pool="encode")

    def paged_kv(self) -> dict[Hashable, PagedKV]:
        """The one paged loop's KV (the graph's `paged`): the pool, the family's device side, its recompute."""
        paged = self.graph.paged_loop
        if paged is None:
            return {}
        return {self.graph.paged: PagedKV(self.kv, self.kv_ops, self.recompute_rows)}

    def paged_limits(self, settings: Any, num_blocks: int) -> None:
        """The KV pool's spec (`num_blocks` blocks) and the queue limits from the AR loop's settings."""
        self.kv = KVSpec(num_blocks, settings.block_size, settings.max_blocks, settings.prefix_cache)
        self.prefill_budget, self.max_waiting = settings.prefill_chunk_rows, settings.max_waiting
        self.max_group, self.max_buffered_chunks = settings.max_running, settings.max_buffered_chunks

    # ----- the engine thread ---------------------------------------------------------------------
    def bind(self, launch: LaunchState) -> None:
        self._launch = launch

    def thread_setup(self) -> None:
        threads = self.card.runtime.cpu_threads
        if threads is not None and self.device.type == "cpu":
            torch.set_num_threads(threads)  # this thread's intra-op threads (OpenMP settings are per thread)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # the current device is per thread: kernels, copies, replays

    def front_start(self, slots: list[int]) -> None:
        pass  # the front's encoders run a whole recording per call: no state to reset

    # ----- a request's life ----------------------------------------------------------------------
    def check_group_size(self, group: Sequence[tuple[Any, Any]]) -> None:
        """Requests (request, prepared) sharing one prompt: at most max_running, a codec stream each that decodes
        audio."""
        if len(group) > self.max_group:
            raise ValueError(f"n: a group of {len(group)} exceeds the card's max_running")
        codec = self.codec_loop
        if codec is not None and sum(r.decode_audio for r, _ in group) > codec.settings.max_streams:
            raise ValueError("n: a group decoding audio needs a codec stream each")

    def needs(self, record: Any) -> Needs:
        slots = {"kv": 1, "codec": int(record.request.decode_audio)} if self.codec_loop is not None else {"kv": 1}
        return Needs(slots, kv_rows=int(record.rows.shape[0]) + record.work.max_frames)

    def with_codec(self, record: Any, slots: Mapping[str, int], states: dict[Hashable, LoopState],
                   context: list[tuple[int, ...]] | None = None) -> dict[Hashable, LoopState]:
        """`states` (the AR loop's) with the codec loop's state, where the card declares the codec loop (`context`:
        left-context frames the codec decodes first)."""
        if self.codec_loop is not None:
            states[self.codec_loop.kind] = self.codec_loop.init(
                record.id, sample_rate=self.sample_rate, enabled=record.request.decode_audio,
                slot=slots.get("codec", -1), context=context)
        return states

    def admit_codec(self, record: Any) -> None:
        """Fresh codec state for the request's stream (in stream order)."""
        codec = self.codec_exec
        if "codec" in record.slots and codec is not None:
            slot = record.slots["codec"]
            self._launch(lambda: codec.admit(slot))

    def stats(self) -> dict[str, Any]:
        return graph_stats(self.frames, self.codec_exec)
