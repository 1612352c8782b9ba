"""The engine's paged KV: requests' records meet the block pager (policy) and the AR executor (device).

Owns: `RequestKV`: a request's prompt keys (chained hashes of its rows, made once per record), whether a
request fits (admission by free blocks), taking blocks at admission (rows found in the prefix cache count
as prefilled), growing every request's blocks before a step, oldest first, and preempting the newest
when the pool runs dry (its KV goes back; its slot, codec stream, backbone state and frames stay, and
once blocks are free again it recomputes the prompt and its frames' rows, then decodes on), resuming
preempted requests oldest first, a group member sharing its leader's prompt blocks, entering computed
prompt blocks into the prefix cache, releasing, the cache's invalidation by new weights, and handing the
device its work (block copies, table entries) once per step.
Must not know: scheduling, threads, streams, the engine's queues.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

import torch

from v2.card import ARDecodeSettings
from v2.contracts import LoopKind, WorkPlan, WorkUnitKind
from v2.models.kv_cache import PagedKVCache
from v2.runtime.blocks import chain_keys
from v2.families.moss_tts_local.ar_executor import ARExecutor, OnStream
from v2.runtime.paging import KVPager
from v2.runtime.records import RequestRecord


def pool_blocks(settings: ARDecodeSettings, model: Any) -> int:
    """The KV pool's size in blocks from the card: `kv_blocks`; or `kv_memory_fraction` of the memory free on
    the model's device now (CUDA: `mem_get_info`; a CPU: the host's available memory); else max_running
    requests at full length."""
    if settings.kv_blocks is not None:
        return settings.kv_blocks
    if settings.kv_memory_fraction is None:
        return settings.max_running * settings.max_blocks
    device = model.device
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    per_block = PagedKVCache.block_bytes(model.cfg.backbone, settings.block_size, model.dtype)
    blocks = int(free * settings.kv_memory_fraction) // per_block
    if blocks < settings.max_blocks:
        raise RuntimeError(f"kv_memory_fraction: {settings.kv_memory_fraction} of {free / 2**30:.1f} GiB free holds "
                           f"{blocks} KV blocks, fewer than one request at full length ({settings.max_blocks}); "
                           "raise it or lower max_prompt_rows / max_frames")
    return blocks


class RequestKV:
    def __init__(self, pager: KVPager, executor: ARExecutor | OnStream, assistant_slot: int) -> None:
        """`executor`: where block copies, table entries and forks go (the engine's `OnStream`, which queues
        them on the device stream)."""
        self.pager = pager
        self.executor = executor
        self.assistant_slot = assistant_slot
        self.version = 0  # weights the cached blocks were computed with
        self.paused: dict[int, RequestRecord] = {}  # requests waiting for blocks to (re)compute their rows

    @classmethod
    def build(cls, settings: ARDecodeSettings, executor: ARExecutor | OnStream, assistant_slot: int) -> "RequestKV":
        """The pager over the executor's pool; admissions keep 1% of the pool free while anything runs."""
        blocks = executor.kv.num_blocks
        pager = KVPager(blocks, settings.block_size, max_blocks=settings.max_blocks,
                        prefix_cache=settings.prefix_cache, watermark=blocks // 100)
        return cls(pager, executor, assistant_slot)

    @property
    def max_rows(self) -> int:
        """Rows one request may hold."""
        return self.pager.max_blocks * self.pager.block_size

    # ----- admission -----------------------------------------------------------------------------
    def keys(self, req: RequestRecord) -> list[bytes]:
        """Chained keys of the full blocks of the request's prompt (made once; the prompt never changes
        after it is ready)."""
        if req.kv_keys is None:
            rows = req.rows.contiguous().numpy()
            req.kv_keys = chain_keys(rows.tobytes(), rows.shape[1] * rows.itemsize, self.pager.block_size)
        return req.kv_keys

    def fits(self, req: RequestRecord) -> bool:
        """Whether the request's prompt (what is not cached) fits in the free blocks now."""
        return self.pager.can_admit(self.keys(req), int(req.rows.shape[0]))

    def admit(self, req: RequestRecord) -> None:
        """Blocks for the prompt of an admitted request (not a group member that will share its leader's)."""
        assert req.ar is not None
        req.ar.prefilled = req.ar.computed = self.pager.admit(req.id, req.ar.slot, self.keys(req),
                                                              int(req.rows.shape[0]))

    def set_weights(self, version: int) -> None:
        """New weights: nothing computed before may be reused."""
        if version != self.version:
            self.pager.clear_cache()
            self.version = version

    # ----- preemption and resumption -------------------------------------------------------------
    def before_step(self, running: dict[int, RequestRecord], plans: list[WorkPlan]) -> tuple[list[WorkPlan], list[int]]:
        """Blocks for every AR write of this step, oldest request first; preempts the newest when dry.
        Returns the plans that may run (a preempted request's AR plan does not) and the preempted ids.
        Preempted requests are resumed here too when blocks allow (they plan from the next step): admission,
        which resumes them first, does not run while a weight update waits for running requests to end."""
        self.resume(running)
        writes, ordered, last = [], True, None
        ar_decode, prefill = LoopKind.AR_DECODE, WorkUnitKind.PREFILL
        for plan in plans:
            if plan.loop is ar_decode:
                p, rid = plan.payload, plan.request_id
                if plan.signature.kind is prefill:
                    writes.append((rid, p.start, p.start + int(p.rows.shape[0])))
                else:
                    writes.append((rid, p.position, p.position + 1))
                if last is not None and rid <= last:
                    ordered = False
                last = rid
        preempted = self.pager.grow(writes if ordered else sorted(writes))  # oldest request first
        if not preempted:
            return plans[:], preempted
        gone = set(preempted)
        return [p for p in plans if not (p.loop is LoopKind.AR_DECODE and p.request_id in gone)], preempted

    def pause(self, req: RequestRecord) -> None:
        """The request (its AR state `paused`: preempted, a new segment, a group member on its own) waits for
        blocks to (re)compute its rows."""
        self.paused[req.id] = req

    def resume(self, running: dict[int, RequestRecord]) -> bool:
        """Give paused requests, oldest first, blocks to recompute their rows; True when none waits. One
        with a frame still on the device waits for it (its rows include that frame)."""
        if not self.paused:
            return True
        for rid in sorted(self.paused):
            req = self.paused[rid]
            ar = req.ar
            assert ar is not None
            if running.get(rid) is not req or not ar.paused:
                del self.paused[rid]
                continue
            if ar.launched_frames > len(ar.codes):
                return False
            rows = self.recompute_rows(req)
            if not self.pager.can_admit(self.keys(req), int(rows.shape[0])):
                return False
            ar.rows, ar.paused = rows, False
            ar.prefilled = ar.computed = self.pager.admit(req.id, ar.slot, self.keys(req), int(rows.shape[0]))
            del self.paused[rid]
        return True

    def recompute_rows(self, req: RequestRecord) -> torch.Tensor:
        """The rows whose KV a resumed request needs: its prompt, then one row per frame made so far."""
        assert req.ar is not None
        prompt = req.ar.rows[: req.ar.prompt_len]
        if not req.ar.codes:
            return prompt
        frames = torch.tensor([(self.assistant_slot, *codes) for codes in req.ar.codes], dtype=prompt.dtype)
        return torch.cat([prompt, frames])  # [T + F, 13]

    # ----- sharing, caching, release -------------------------------------------------------------
    def fork(self, leader: RequestRecord, member: RequestRecord) -> None:
        """The member shares the leader's prompt blocks and takes its backbone state: no prefill, no copy."""
        assert leader.ar is not None and member.ar is not None
        self.pager.fork(leader.id, member.id, member.ar.slot, leader.ar.prompt_len)
        self.executor.fork(leader.ar.slot, member.ar.slot)
        member.ar.prefilled, member.ar.prefix_from = member.ar.prompt_len, None

    def computed(self, reqs: Iterable[RequestRecord]) -> None:
        """After prefill: the requests' computed full prompt blocks enter the prefix cache. O(1) per request
        once its prompt blocks are all handled; nothing at all when no running request has any left."""
        pending = self.pager.uncommitted
        if not pending:
            return
        for req in reqs:
            if req.id in pending and req.ar is not None and req.version == self.version:
                self.pager.commit(req.id, req.ar.computed)

    def release(self, req: RequestRecord) -> None:
        self.pager.release(req.id)
        self.paused.pop(req.id, None)

    def flush(self) -> None:
        """The step's device work (block copies, then table entries), before any batch runs."""
        if not self.pager.has_ops:
            return
        ops = self.pager.take_ops()
        self.executor.apply(ops.copies, ops.entries)

    def stats(self) -> dict[str, int]:
        return self.pager.stats()
