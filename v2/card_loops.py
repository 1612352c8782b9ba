"""A card's loop declarations: `LoopDecl` (a loop's class and the loops it feeds), `LoopTable` (a family's
`loops` section and the checks of the graph it declares: an edge to a loop not declared, a cycle, an edge
whose target does not take what its source gives, a loop fed by none or by two, two paged loops naming one
`expert`, whose KV specs would be one), and the settings every paged AR loop and every codec chunk loop
declares (`PagedLoopDecl`, `ChunkLoopDecl`: a family subclasses them). v2/card.py re-exports every name.
Must not know: finding or loading a card, `ModelCard`, families, the runtime.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator, model_validator

from v2.card_sections import _Frozen, check_buckets


class LoopDecl(_Frozen):
    """A loop a card declares: its class (one of its family's loops) and the loops it feeds, by name (the
    edges of the card's loop graph: data, which the engine drives as written). A family's section subclasses
    this per loop class with its settings, and says what a loop of that class takes and gives (`takes`,
    `gives`: a kind of item, e.g. "frames"; an edge a -> b is one the family can drive when a gives what b
    takes) or that it runs before admission, outside the graph (`front`)."""

    class_: str = Field(alias="class")
    feeds: tuple[str, ...] = ()
    takes: ClassVar[str | None] = None  # what it works on, fed by another loop (None: it plans on its own)
    gives: ClassVar[str | None] = None  # what it makes for the loops it feeds (None: it feeds none)
    front: ClassVar[bool] = False       # run before admission (e.g. encoding references): no edges


class LoopTable(_Frozen):
    """A family's `loops` section: one field per loop the family can drive, each a `LoopDecl` subclass. A loop
    the family can do without is an optional field (None or absent: not declared, e.g. no vocoder for
    rollouts that need no audio); one it cannot is required (missing: refused, naming it). The loops a card
    declares and their `feeds` are the graph the engine drives (`driven`); `check` refuses, naming the
    field, a graph the family's loops cannot make: an edge to a loop not declared, a cycle, an edge whose
    target does not take what its source gives (or from or to a front loop), a loop that takes input and
    that no loop (or more than one) feeds."""

    def declared(self) -> dict[str, LoopDecl]:
        """The loops the card declares, by name, in the section's order."""
        out: dict[str, LoopDecl] = {}
        for name in type(self).model_fields:
            decl = getattr(self, name)
            if isinstance(decl, LoopDecl):
                out[name] = decl
        return out

    def driven(self) -> list[tuple[str, LoopDecl]]:
        """The declared loops the engine drives (not `front`), in feeding order: a loop comes before the loops
        it feeds, otherwise in the section's order (the graph is checked: no cycle)."""
        loops = {n: d for n, d in self.declared().items() if not d.front}
        fed = {t for d in loops.values() for t in d.feeds}
        order, ready = [], [n for n in loops if n not in fed]
        feeders = {n: sum(n in d.feeds for d in loops.values()) for n in loops}
        while ready:
            name = ready.pop(0)
            order.append((name, loops[name]))
            for t in loops[name].feeds:
                feeders[t] -= 1
                if not feeders[t]:
                    ready.append(t)
        return order

    def check(self) -> None:
        """Refuse (ValueError, the field named) a declared graph the family's loops cannot make."""
        loops = self.declared()
        for name, d in loops.items():
            for t in d.feeds:
                if t not in loops:
                    raise ValueError(f"loops.{name}.feeds: no loop {t!r} is declared (declared: {', '.join(loops)})")
            if len(set(d.feeds)) != len(d.feeds):
                raise ValueError(f"loops.{name}.feeds: a loop is named twice")
        for name in loops:
            cycle = _cycle(loops, name, [name])
            if cycle:
                raise ValueError(f"loops.{name}.feeds: a cycle ({' -> '.join(cycle)}); a loop feeds only loops after it")
        for name, d in loops.items():
            for t in d.feeds:
                target = loops[t]
                if d.front or target.front:
                    front = name if d.front else t
                    raise ValueError(f"loops.{name}.feeds: {front!r} ({loops[front].class_}) runs before admission; "
                                     "it feeds no loop and no loop feeds it")
                if d.gives is None or d.gives != target.takes:
                    gives = f"gives {d.gives}" if d.gives else "gives nothing another loop takes"
                    takes = f"takes {target.takes}" if target.takes else "takes no input"
                    raise ValueError(f"loops.{name}.feeds: {t!r} ({target.class_}) {takes}; {name!r} ({d.class_}) {gives}")
        for t, target in loops.items():
            feeders = [n for n, d in loops.items() if t in d.feeds]
            if target.takes is not None and not feeders:
                raise ValueError(f"loops.{t}: no loop feeds it (a {target.class_} takes {target.takes}): name it in "
                                 f"a loop's feeds, or leave [loops.{t}] out")
            if len(feeders) > 1:
                raise ValueError(f"loops.{t}: fed by {' and '.join(feeders)}; a {target.class_} takes one stream")
        experts: dict[str, str] = {}
        for name, d in loops.items():
            expert = getattr(d, "expert", None)
            if isinstance(d, PagedLoopDecl) and expert is not None:
                if expert in experts:
                    raise ValueError(f"loops.{name}.expert: {expert!r} is the expert of loops.{experts[expert]} too; "
                                     "two paged loops would share one KV spec by accident (each paged loop holds its "
                                     "own pool over its own expert's layers)")
                experts[expert] = name


def _cycle(loops: dict[str, LoopDecl], start: str, path: list[str]) -> list[str] | None:
    """A path of edges from `path[-1]` back to `start` (a cycle through it), or None."""
    for t in loops[path[-1]].feeds:
        if t == start:
            return [*path, t]
        if t not in path:
            found = _cycle(loops, start, [*path, t])
            if found:
                return found
    return None


class PagedLoopDecl(LoopDecl):
    """The settings every family's AR loop declares (the loop that holds the paged KV and gives frames to the
    loops it `feeds`): request caps, slots, the queue, prefill chunking, batch buckets and the paged KV pool.
    A family's subclass names its class (`class_: Literal[...]`) and adds its own settings (sampling, text
    segmentation, ...)."""

    gives: ClassVar[str | None] = "frames"  # to the loops it `feeds` (the card's edges: a codec loop, or none)
    max_frames: int = Field(ge=1)          # cap on a request's frames
    max_prompt_rows: int = Field(ge=1)     # cap on a request's prompt rows
    max_text_chars: int = Field(default=20_000, ge=1)  # cap on each text field (checked first)
    max_running: int = Field(ge=1)         # KV slots: requests decoding at once
    max_waiting: int = Field(ge=1)         # requests queued for a slot; past it submit() refuses (overload)
    max_buffered_chunks: int = Field(ge=1)  # chunks a subscriber may fall behind before its request is aborted
    prefill_chunk_rows: int = Field(ge=1)  # prompt rows prefilled per engine step, all requests together
    batch_buckets: list[int]               # AR_FRAME batches are padded up to one of these
    # paged KV: rows per block; the pool as a number of blocks, or as a fraction of the device memory free
    # when the runtime starts (weights loaded; codec streams, graphs and activations live in the rest).
    # Neither: max_running requests at full length (the memory a contiguous cache would take).
    block_size: int = Field(default=16, ge=1)
    kv_blocks: int | None = Field(default=None, ge=1)
    kv_memory_fraction: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    prefix_cache: bool = True              # full prompt blocks stay cached for later requests until evicted
    # the expert whose layers this loop's KV holds (a name of the card's experts; None: the family's one);
    # two paged loops of a card naming one expert would share one KV spec: refused at load
    expert: str | None = None

    _buckets = field_validator("batch_buckets")(check_buckets)

    @property
    def max_blocks(self) -> int:
        """Blocks one request holds at its longest (max_prompt_rows + max_frames rows)."""
        return -(-(self.max_prompt_rows + self.max_frames) // self.block_size)

    @model_validator(mode="after")
    def _fits(self) -> "PagedLoopDecl":
        if self.max_running > self.batch_buckets[-1]:
            raise ValueError(f"max_running ({self.max_running}) exceeds the largest batch bucket")
        if self.kv_blocks is not None and self.kv_memory_fraction is not None:
            raise ValueError("kv_blocks and kv_memory_fraction: give one KV budget, not both")
        if self.kv_blocks is not None and self.kv_blocks < self.max_blocks:
            raise ValueError(f"kv_blocks ({self.kv_blocks}) cannot hold one request at full length "
                             f"({self.max_blocks} blocks of {self.block_size} rows)")
        return self


class ChunkLoopDecl(LoopDecl):
    """The settings of a codec loop that takes frames and streams them as audio chunks (the kit's chunk
    stream, v2/kit/chunks.py). A family's subclass names its class."""

    takes: ClassVar[str | None] = "frames"
    gives: ClassVar[str | None] = "audio"   # its chunks: the audio that streams to the caller (and to an added loop)
    first_chunk_frames: int = Field(ge=1)  # frames in a stream's first audio chunk
    chunk_frames: int = Field(ge=1)        # frames in every later chunk (the last may be shorter)
    max_streams: int = Field(ge=1)         # codec state slots
    batch_buckets: list[int]               # AUDIO_CHUNK batches are padded up to one of these
    frame_buckets: list[int]               # a batch's chunk length is padded up to one of these

    _buckets = field_validator("batch_buckets", "frame_buckets")(check_buckets)

    @model_validator(mode="after")
    def _fits(self) -> "ChunkLoopDecl":
        if max(self.first_chunk_frames, self.chunk_frames) > self.frame_buckets[-1]:
            raise ValueError("chunk frames exceed the largest frame bucket")
        if self.max_streams > self.batch_buckets[-1]:
            raise ValueError(f"max_streams ({self.max_streams}) exceeds the largest batch bucket")
        return self
