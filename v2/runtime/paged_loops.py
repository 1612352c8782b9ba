"""Every paged loop of an engine's graph, driven together: one `RequestKV` (pool, tables, prefix cache,
copy-on-write, growth) per paged loop, and what spans them: a preemption takes back the blocks of every
loop of the victim, admission waits while any loop has a request waiting for blocks, the step's prefill
kinds, and the counters summed.

Owns: `PagedLoops`. `before_step(running, plans)` gives each loop's pool the blocks its plans write (oldest
request first, per pool); when one pool runs dry its pager picks the victim (the newest request holding
blocks of that pool, possibly the asker), and the victim gives back the blocks of all its loops (each of
its paged loops is told `preempted` and waits to recompute its rows: the prompt and what it made, the
items its upstream had fed it included), so a request is paused or running as a whole and resumes by
recompute. Plans of a victim's paged loops are dropped from the step. A loop another feeds gets its first
prompt while the request runs (`new_prompt`), and waits for blocks like a resumed request.
Must not know: any family, tensors' contents, scheduling, threads, streams, the engine's queues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Hashable, Iterable, Mapping, Sequence

from v2.contracts import WorkPlan
from v2.runtime.kv import RequestKV
from v2.runtime.records import RequestRecord

if TYPE_CHECKING:
    from torch import Tensor


class PagedLoops:
    def __init__(self, kvs: Sequence[RequestKV], pools: Mapping[Hashable, Sequence[str]]) -> None:
        """`kvs`: one per paged loop, the first the one whose prompt is the request's; `pools`: each loop's
        slot pools by loop name (giving back its slot gives back its blocks)."""
        if not kvs:
            raise ValueError("paged: no paged loop")
        self.kvs = tuple(kvs)
        self.first = self.kvs[0]
        self.by_name = {kv.name: kv for kv in self.kvs}
        self.by_pool = {pool: kv for kv in self.kvs for pool in pools.get(kv.name, ())}
        self.prefill_kinds = frozenset(kv.prefill for kv in self.kvs)
        self.preemptions = 0  # requests preempted (each counted once, whatever its loops held)

    # ----- admission -----------------------------------------------------------------------------
    def fits(self, req: RequestRecord) -> bool:
        """The request's prompt fits its first loop's pool, and every other pool has room beyond its headroom."""
        if not self.first.fits(req):
            return False
        for kv in self.kvs[1:]:
            blocks = kv.pager.blocks
            if blocks.num_free <= (kv.pager.watermark if kv.pager.tables else 0):
                return False
        return True

    def set_weights(self, version: int) -> None:
        for kv in self.kvs:
            kv.set_weights(version)

    def resume(self, running: dict[int, RequestRecord]) -> bool:
        """Paused requests get blocks again, per pool, oldest first; True when none waits in any pool."""
        done = True
        for kv in self.kvs:
            done = kv.resume(running) and done
        return done

    # ----- each step -----------------------------------------------------------------------------
    def before_step(self, running: dict[int, RequestRecord], plans: list[WorkPlan]) -> list[WorkPlan]:
        """Blocks for every paged write among `plans`, pool by pool; a victim's loops all give theirs back.
        Returns the plans that may run; the step's block copies and table entries go to the device."""
        victims: set[int] = set()
        single = len(self.kvs) == 1  # the common case: no scan for whose plans these are
        for kv in self.kvs:
            if not single and not any(p.loop == kv.name for p in plans):
                kv.resume(running)  # preempted requests resume here too (admission waits during an update)
                continue
            plans, preempted = kv.before_step(running, plans)
            for rid in preempted:
                req = running[rid]
                kv.loop.preempted(kv.state(req))
                kv.pause(req)
                self.preemptions += rid not in victims
                victims.add(rid)
                for other in self.kvs:
                    if other is not kv and other.holds(rid):
                        other.pager.release(rid)
                        other.loop.preempted(other.state(req))
                        other.pause(req)
        if victims:
            names = set(self.by_name)
            plans = [p for p in plans if not (p.request_id in victims and p.loop in names)]
        for kv in self.kvs:
            kv.flush()
        return plans

    def computed(self, reqs: Iterable[RequestRecord]) -> None:
        reqs = list(reqs)
        for kv in self.kvs:
            kv.computed(reqs)

    def new_prompt(self, req: RequestRecord, loop: Hashable, rows: Tensor) -> None:
        """Loop `loop` of the request goes on with a new prompt (a next segment; a fed loop's first one)."""
        self.by_name[loop].new_prompt(req, rows)

    def release(self, req: RequestRecord) -> None:
        for kv in self.kvs:
            kv.release(req)

    def kv_rows(self, plan: WorkPlan) -> int:
        """Rows a plan of a paged loop writes."""
        start, end = self.by_name[plan.loop].loop.kv_span(plan)
        return end - start

    # ----- counters ------------------------------------------------------------------------------
    def preempted_count(self, running: Iterable[RequestRecord]) -> int:
        """Running requests waiting to (re)compute rows in some loop (each counted once)."""
        out = 0
        for r in running:
            out += any((s := kv.state(r)) is not None and s.paused for kv in self.kvs)
        return out

    def stats(self) -> dict[str, object]:
        """The pools' counters summed (each loop's own under `kv_loops` when there are several)."""
        each = [kv.stats() for kv in self.kvs]
        out: dict[str, object] = {k: (sum(s[k] for s in each) if k != "kv_block_size" else each[0][k]) for k in each[0]}
        out["kv_preemptions"] = self.preemptions
        if len(each) > 1:
            out["kv_loops"] = {str(getattr(kv.name, "value", kv.name)): s for kv, s in zip(self.kvs, each)}
        return out
