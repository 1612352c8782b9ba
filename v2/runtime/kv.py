"""The engine's paged KV: requests' records meet the block pager (policy), the loop that holds the KV (its
state, written only by that loop) and the family's device side (block copies, table entries, forks).

Owns: `RequestKV`, one paged loop's (a graph may hold several: `v2.runtime.paged_loops` drives them
together): a request's prompt keys (chained hashes of its rows, made once per record), whether a
request fits (admission by free blocks), taking blocks at admission (rows found in the prefix cache count
as prefilled), growing every request's blocks before a step, oldest first, and preempting the newest
when the pool runs dry (its KV goes back; its slot, codec stream, backbone state and frames stay, and
once blocks are free again it recomputes the prompt and its frames' rows, then decodes on), resuming
preempted requests oldest first, a group member sharing its leader's prompt blocks, entering computed
prompt blocks into the prefix cache, releasing, the cache's invalidation by new weights, and handing the
device its work (block copies, table entries) once per step. The rows a resumed request recomputes are
the family's layout (`recompute`). The first paged loop's prompt is the request's (`record.rows`, known
at admission); another's is given while the request runs (`new_prompt`: `record.prompts[name]`).
Must not know: any family, tensors' contents, scheduling, threads, streams, the engine's queues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable

from v2.contracts import LoopState, WorkPlan, WorkUnitKind
from v2.runtime.blocks import chain_keys
from v2.runtime.family import KVOps, KVSpec, PagedLoop
from v2.runtime.paging import KVPager
from v2.runtime.records import RequestRecord

if TYPE_CHECKING:
    from torch import Tensor

Recompute = Callable[[LoopState], "Tensor"]  # the rows a resumed request recomputes, from its paged loop's state


class RequestKV:
    def __init__(self, pager: KVPager, executor: KVOps, loop: PagedLoop[Any, Any], name: Hashable,
                 recompute: Recompute, *, first: bool = True, prefill: Hashable = WorkUnitKind.PREFILL) -> None:
        """`executor`: where block copies, table entries and forks go (`apply`, `fork`: the family's, queued
        on the device stream); `loop` / `name`: the loop that holds the KV and its name in a record;
        `recompute(state)`: the rows a resumed request recomputes (the family's layout); `first`: its prompt
        is the request's (`record.rows`), else one given while the request runs; `prefill`: its prefill kind."""
        self.pager = pager
        self.executor = executor
        self.loop, self.name, self.recompute = loop, name, recompute
        self.first, self.prefill = first, prefill
        self.version = 0  # weights the cached blocks were computed with
        self.paused: dict[int, RequestRecord] = {}  # requests waiting for blocks to (re)compute their rows

    @classmethod
    def build(cls, spec: KVSpec, executor: KVOps, loop: PagedLoop[Any, Any], name: Hashable,
              recompute: Recompute, *, first: bool = True, prefill: Hashable = WorkUnitKind.PREFILL) -> "RequestKV":
        """The pager over the family's pool; admissions keep 1% of the pool free while anything runs."""
        pager = KVPager(spec.num_blocks, spec.block_size, max_blocks=spec.max_blocks,
                        prefix_cache=spec.prefix_cache, watermark=spec.num_blocks // 100)
        return cls(pager, executor, loop, name, recompute, first=first, prefill=prefill)

    def rows(self, req: RequestRecord) -> Tensor:
        """The loop's current prompt (ready: laid out)."""
        rows = req.rows if self.first else req.prompts.get(self.name)
        assert rows is not None, "a request without a prompt reached the paged KV"
        return rows

    def holds(self, rid: int) -> bool:
        """Whether the request holds blocks of this pool."""
        return rid in self.pager.tables

    def state(self, req: RequestRecord) -> Any:
        """The state of the request's KV-holding loop (None before admission)."""
        return req.states.get(self.name)

    @property
    def max_rows(self) -> int:
        """Rows one request may hold."""
        return self.pager.max_blocks * self.pager.block_size

    # ----- admission -----------------------------------------------------------------------------
    def keys(self, req: RequestRecord) -> list[bytes]:
        """Chained keys of the full blocks of the request's prompt (made once; the prompt never changes
        after it is ready)."""
        keys = req.kv_keys if self.first else req.prompt_keys.get(self.name)
        if keys is None:
            rows = self.rows(req).contiguous().numpy()
            keys = chain_keys(rows.tobytes(), rows.shape[1] * rows.itemsize, self.pager.block_size)
            if self.first:
                req.kv_keys = keys
            else:
                req.prompt_keys[self.name] = keys
        return keys

    def fits(self, req: RequestRecord) -> bool:
        """Whether the request's prompt (what is not cached) fits in the free blocks now."""
        return self.pager.can_admit(self.keys(req), int(self.rows(req).shape[0]))

    def admit(self, req: RequestRecord) -> None:
        """Blocks for the prompt of an admitted request (not a group member that will share its leader's)."""
        state = self.state(req)
        self.loop.kv_given(state, self.pager.admit(req.id, state.slot, self.keys(req), int(self.rows(req).shape[0])))

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
        name, span = self.name, self.loop.kv_span
        for plan in plans:
            if plan.loop == name:
                rid = plan.request_id
                writes.append((rid, *span(plan)))
                if last is not None and rid <= last:
                    ordered = False
                last = rid
        preempted = self.pager.grow(writes if ordered else sorted(writes))  # oldest request first
        if not preempted:
            return plans[:], preempted
        gone = set(preempted)
        return [p for p in plans if not (p.loop == name and p.request_id in gone)], preempted

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
            state = self.state(req)
            if running.get(rid) is not req or not state.paused:
                del self.paused[rid]
                continue
            if not self.loop.resumable(state):
                return False
            rows = self.recompute(state)  # the prompt, then the rows of what it made so far
            if not self.pager.can_admit(self.keys(req), int(rows.shape[0])):
                return False
            self.loop.resume(state, rows, self.pager.admit(req.id, state.slot, self.keys(req), int(rows.shape[0])))
            del self.paused[rid]
        return True

    # ----- sharing, caching, release -------------------------------------------------------------
    def fork(self, leader: RequestRecord, member: RequestRecord) -> None:
        """The member shares the leader's prompt blocks and takes its backbone state: no prefill, no copy."""
        lead, state = self.state(leader), self.state(member)
        self.pager.fork(leader.id, member.id, state.slot, lead.prompt_len)
        self.executor.fork(lead.slot, state.slot)
        self.loop.shared(state)

    def computed(self, reqs: Iterable[RequestRecord]) -> None:
        """After prefill: the requests' computed full prompt blocks enter the prefix cache. O(1) per request
        once its prompt blocks are all handled; nothing at all when no running request has any left."""
        pending = self.pager.uncommitted
        if not pending:
            return
        for req in reqs:
            state: Any = req.states.get(self.name)
            if req.id in pending and state is not None and req.version == self.version:
                self.pager.commit(req.id, state.computed)

    def release(self, req: RequestRecord) -> None:
        self.pager.release(req.id)
        self.paused.pop(req.id, None)

    def new_prompt(self, req: RequestRecord, rows: Tensor) -> None:
        """The request goes on with a new prompt (a long text's next segment, laid out by its family): its
        blocks go back, and it waits for blocks for the new rows, as a preempted request does."""
        self.release(req)
        if self.first:
            req.rows, req.kv_keys = rows, None
        else:
            req.prompts[self.name] = rows
            req.prompt_keys.pop(self.name, None)
        self.pause(req)

    def preempted_count(self, running: Iterable[RequestRecord]) -> int:
        states: Iterable[Any] = (r.states.get(self.name) for r in running)
        return sum(bool(s is not None and s.paused) for s in states)

    def flush(self) -> None:
        """The step's device work (block copies, then table entries), before any batch runs."""
        if not self.pager.has_ops:
            return
        ops = self.pager.take_ops()
        self.executor.apply(ops.copies, ops.entries)

    def stats(self) -> dict[str, int]:
        return self.pager.stats()

