"""The two-loop test family bound to its card: two tiny Qwen3 stacks (the shared `v2.models.qwen3` layers, each
with its own paged KV pool, widths and layer counts), their loops on the runtime's paged AR sequence, and a
chunk loop whose "codec" turns each frame into a few samples.

A request: `prompt` (thinker token ids), `talker_prefix` (thinker-vocabulary ids the talker's prompt opens
with; a voice, say), `tokens` (how many tokens the thinker makes). The thinker prefills its prompt, then
makes one token a step (greedy). The talker starts when the thinker's first token arrives: its prompt is
the prefix's rows and a row of that token; its frame t then needs the thinker's token t + 1 (its
`frame_feed`) or the thinker's end, and waits for it holding no batch row; it makes one frame per thinker
token and ends when the thinker has ended and every token is spoken. A frame's code goes to the chunk loop.
Rows: thinker [T, 1] token ids; talker [T, 2] (text id: token + 1, 0 after the thinker's end; code id, BOS
in the prompt's last row). Each loop's recompute is its prompt and a row per step it made, which for the
talker includes the fed token it consumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from v2.contracts import AudioChunk, FinishReason, Kind, LoopState, ShapeSignature, WorkPlan, WorkUnitKind
from v2.models import exact
from v2.models.config import BackboneConfig
from v2.models.kv_cache import PagedKVCache
from v2.models.qwen3 import Qwen3Backbone
from v2.runtime.added import Spoken
from v2.kit.chunks import ChunkLoop
from v2.runtime.family import Batch, FactoryBase, Halves, KVSpec, LoopGraph, Needs, PagedKV, VoiceSpec
from v2.runtime.handles import Metrics, SpeechResult
from v2.kit.sequence import ARLoop, ARSequence, FrameRow

from twoloop.card import TwoLoopCard

THINKER, TALKER, CODEC, ALIGNER = "thinker", "talker", "codec", "aligner"  # the card's loop names
THINK_VOCAB, TALK_VOCAB = 48, 40
BOS = TALK_VOCAB        # the code id of the talker prompt's last row
HOP = 4                 # samples per frame
SAMPLE_RATE = 16_000
NEVER = 1 << 30         # no stop decision: the loops end by length and by their upstream's end


class Work(Kind):
    THINK_PREFILL = "think_prefill"
    THINK_TOKEN = "think_token"
    TALK_PREFILL = "talk_prefill"
    TALK_FRAME = "talk_frame"


@dataclass(frozen=True)
class TwoLoopRequest:
    prompt: tuple[int, ...]
    talker_prefix: tuple[int, ...] = (1, 2, 3)
    tokens: int = 6
    stream: bool = False
    timeout: float | None = None
    voice: str | None = None


@dataclass
class Prepared:
    rows: Tensor      # the thinker's prompt [T, 1]
    prefix: Tensor    # the talker prompt's first rows [P, 2]
    inputs: tuple[object, ...] = ()


@dataclass
class TalkerState(ARSequence):
    tokens: list[int] = field(default_factory=list)  # the thinker's tokens fed so far
    upstream: FinishReason | None = None            # how the thinker ended, once it has

    @property
    def wants_input(self) -> bool:
        """No prompt yet: it waits for the thinker's first token."""
        return self.rows is None and self.finish is None


class TalkerLoop(ARLoop[TalkerState]):
    """The talker: the runtime's paged AR loop, fed tokens (`feed`) and waiting for the one each frame needs.
    `sequential`: it waits for the thinker's end before its first frame (the reference a cascade equals);
    `overlapped` counts the frames launched while the thinker was still running."""

    sequential = False
    overlapped = 0

    def frame_feed(self, state: TalkerState, frame: int) -> int:
        return state.tokens[frame + 1] + 1 if frame + 1 < len(state.tokens) else 0

    def next(self, state: TalkerState) -> WorkPlan | None:
        if state.rows is None or (self.sequential and state.upstream is None):
            return None
        decoding = state.prefilled >= int(state.rows.shape[0])
        if decoding and state.upstream is None and state.launched_frames + 1 >= len(state.tokens):
            return None  # its next frame's token is not there yet: it waits, holding no batch row
        return super().next(state)

    def launched(self, state: TalkerState, plan: WorkPlan) -> None:
        super().launched(state, plan)
        if plan.signature.kind is Work.TALK_FRAME and state.upstream is None:
            self.overlapped += 1

    def feed(self, state: TalkerState, items: Sequence[tuple[int, ...]], upstream: FinishReason | None) -> None:
        state.tokens += [item[0] for item in items]
        if upstream is not None and state.upstream is None:
            state.upstream = upstream
            state.max_frames = min(state.max_frames, len(state.tokens))  # one frame per token
            if len(state.codes) >= state.max_frames and state.finish is None:
                state.finish = FinishReason.LENGTH


def think_rows(state: ARSequence) -> Tensor:
    """The thinker's rows to recompute: its prompt, then a row of each token it made."""
    made = torch.tensor([c[0] for c in state.codes], dtype=torch.long).reshape(-1, 1)
    return torch.cat([state.rows[: state.prompt_len], made])


def talk_rows(loop: TalkerLoop, state: TalkerState) -> Tensor:
    """The talker's rows to recompute: its prompt, then (the fed token it consumed, its code) per frame."""
    made = torch.tensor([[loop.frame_feed(state, t), c[0]] for t, c in enumerate(state.codes)],
                        dtype=torch.long).reshape(-1, 2)
    return torch.cat([state.rows[: state.prompt_len], made])


def config(hidden: int, layers: int, vocab: int) -> BackboneConfig:
    return BackboneConfig(hidden_size=hidden, num_layers=layers, num_heads=hidden // 16, num_kv_heads=1, head_dim=16,
                          intermediate_size=2 * hidden, vocab_size=vocab, rms_norm_eps=1e-6, rope_theta=10_000.0)


class Stack(nn.Module):
    """One loop's model: input rows (one embedding table per row column, summed) through a Qwen3 stack, a head."""

    def __init__(self, cfg: BackboneConfig, tables: Sequence[int], out: int) -> None:
        super().__init__()
        self.backbone = Qwen3Backbone(cfg, embed_tokens=False)
        self.embeds = nn.ModuleList(nn.Embedding(n, cfg.hidden_size) for n in tables)
        self.head = nn.Linear(cfg.hidden_size, out, bias=False)

    def embed(self, rows: Tensor) -> Tensor:
        """rows [..., width] int64 -> [..., H]."""
        x = self.embeds[0](rows[..., 0])
        for i in range(1, len(self.embeds)):
            x = x + self.embeds[i](rows[..., i])
        return x


class LoopExec:
    """One paged loop's device side: its KV pool and block tables, its per-slot state (`hidden`), its prefill
    and frame executors, and its `KVOps` (block copies and table entries, queued on the engine's stream)."""

    def __init__(self, stack: Stack, cfg: BackboneConfig, settings: Any, *, num_blocks: int, talker: bool) -> None:
        self.stack, self.talker = stack, talker
        self.cache = PagedKVCache.allocate(cfg, num_blocks, settings.block_size, dtype=torch.float32, device="cpu")
        self.tables = torch.full((settings.max_running + 1, settings.max_blocks), self.cache.dummy_block, dtype=torch.long)
        self.hidden = torch.zeros(settings.max_running + 1, cfg.hidden_size)
        self.launch_state: Any = None
        self.calls: list[tuple[Hashable, int]] = []  # (kind, rows) per launch

    # ----- KVOps ---------------------------------------------------------------------------------
    def apply(self, copies: Sequence[tuple[int, int]], entries: Sequence[tuple[int, int, int]]) -> None:
        ops = PagedKVCache.block_ops(copies, entries)
        if ops is not None:
            n, cache, tables = len(copies), self.cache, self.tables
            self.launch_state(lambda: cache.apply_block_ops(ops, n, tables))

    def fork(self, src: int, dst: int) -> None:
        hidden = self.hidden
        self.launch_state(lambda: hidden[dst].copy_(hidden[src]))

    # ----- PREFILL ------------------------------------------------------------------------------
    def pack_prefill(self, batch: Batch) -> tuple[Any, ...]:
        plans = [p.payload for p in batch.plans]
        width, w = int(plans[0].rows.shape[1]), max(int(p.rows.shape[0]) for p in plans)
        rows = torch.zeros(len(plans), w, width, dtype=torch.long)          # [B, W, width]
        valid = torch.zeros(len(plans), w, dtype=torch.bool)
        positions = torch.zeros(len(plans), w, dtype=torch.long)
        for b, p in enumerate(plans):
            n = int(p.rows.shape[0])
            rows[b, :n], valid[b, :n] = p.rows, True
            positions[b] = p.start + torch.arange(w)
        slots = torch.tensor([p.slot for p in plans])
        last = [(b, p.slot, int(p.rows.shape[0]) - 1) for b, p in enumerate(plans) if p.last]
        return batch.kind, rows, valid, positions, slots, last

    @torch.inference_mode()
    def launch_prefill(self, prepared: tuple[Any, ...]) -> Tensor:
        kind, rows, valid, positions, slots, last = prepared
        self.calls.append((kind, int(rows.shape[0])))
        out = self.stack.backbone.forward_cached(self.stack.embed(rows), self.cache, self.tables[slots], positions,
                                                 valid)  # [B, W, H]
        for b, slot, i in last:
            self.hidden[slot] = out[b, i]
        return torch.zeros(int(rows.shape[0]))

    def read_prefill(self, host: Any, batch: Batch) -> list[None]:
        return [None] * len(batch.plans)

    # ----- a frame (the thinker's token, the talker's code) -------------------------------------------------
    def pack_frame(self, batch: Batch) -> tuple[Any, ...]:
        plans = [p.payload for p in batch.plans]
        return (batch.kind, torch.tensor([p.slot for p in plans]), torch.tensor([p.position for p in plans]),
                torch.tensor([p.feed for p in plans]))

    @torch.inference_mode()
    def launch_frame(self, prepared: tuple[Any, ...]) -> Tensor:
        kind, slots, positions, feeds = prepared
        self.calls.append((kind, int(slots.shape[0])))
        logits = exact.linear(self.hidden[slots], self.stack.head.weight)       # [B, V]
        logprobs = torch.log_softmax(logits, dim=-1)
        code = torch.argmax(logits, dim=-1)                                     # [B]
        row = torch.stack([feeds, code], dim=-1) if self.talker else code[:, None]  # [B, width]
        out = self.stack.backbone.forward_cached(self.stack.embed(row)[:, None], self.cache, self.tables[slots],
                                                 positions[:, None])            # [B, 1, H]
        self.hidden[slots] = out[:, 0]
        return torch.stack([code.float(), logprobs.gather(1, code[:, None])[:, 0]], dim=1)  # [B, 2]

    def read_frame(self, host: Any, batch: Batch) -> list[FrameRow]:
        return [FrameRow(False, (int(c),), (float(lp),)) for c, lp in np.asarray(host)[: len(batch.plans)]]

    def executors(self) -> tuple[Halves, Halves]:
        return (Halves(self.pack_prefill, self.launch_prefill, self.read_prefill),
                Halves(self.pack_frame, self.launch_frame, self.read_frame))


class Codec:
    """The chunk loop's "codec": frame code c -> HOP samples, sin((k + 1) * (c + 1) / 10)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Hashable, int]] = []

    def pack(self, batch: Batch) -> tuple[Tensor, list[int]]:
        frames = batch.plans[0].signature.bucket
        codes = torch.zeros(len(batch.plans), frames)
        lengths = []
        for b, p in enumerate(batch.plans):
            c = [f[0] for f in p.payload.codes]
            codes[b, : len(c)] = torch.tensor(c, dtype=torch.float32)
            lengths.append(len(c))
        return codes, lengths

    def launch(self, packed: tuple[Tensor, list[int]]) -> Tensor:
        codes, _ = packed
        self.calls.append((WorkUnitKind.AUDIO_CHUNK, int(codes.shape[0])))
        k = torch.arange(1, HOP + 1, dtype=torch.float32)
        return torch.sin(k * (codes[..., None] + 1) / 10).reshape(codes.shape[0], 1, -1)  # [B, 1, F * HOP]

    def read(self, host: Any, batch: Batch) -> list[np.ndarray]:
        return [np.asarray(host[b, :, : len(p.payload.codes) * HOP], dtype=np.float32).copy()
                for b, p in enumerate(batch.plans)]


class Align(Kind):
    ALIGN = "align"


@dataclass
class AlignState(LoopState):
    pending: list[AudioChunk] = field(default_factory=list)  # chunks fed, not yet launched
    inflight: bool = False
    upstream: FinishReason | None = None
    marks: list[float] = field(default_factory=list)         # one per chunk: its energy


class AlignLoop:
    """A loop fed by the audio loop (a stand-in for a word aligner): one ALIGN plan per chunk, batched across
    requests, each giving the chunk's energy; it ends when the audio loop has and every chunk is measured."""

    kind = ALIGNER

    def next(self, s: AlignState) -> WorkPlan | None:
        if s.finish is not None or s.inflight or not s.pending:
            return None
        return WorkPlan(s.request_id, ALIGNER, ShapeSignature(Align.ALIGN, "aligner"), s.pending[0].audio)

    def launched(self, s: AlignState, plan: WorkPlan) -> None:
        s.pending.pop(0)
        s.inflight = True

    def expects(self, s: AlignState, plan: WorkPlan) -> bool:
        return s.finish is None

    def advance(self, s: AlignState, plan: WorkPlan, row: float) -> bool:
        s.inflight = False
        s.marks.append(row)
        s.fresh = [row]
        if s.upstream is not None and not s.pending:
            s.finish = s.upstream
        return True

    def feed(self, s: AlignState, items: Sequence[AudioChunk], upstream: FinishReason | None) -> None:
        s.pending += items
        if upstream is not None:
            s.upstream = upstream
            if not s.pending and not s.inflight:
                s.finish = upstream

    def finalize(self, s: AlignState) -> list[float]:
        return list(s.marks)


def energy(audio: np.ndarray) -> float:
    return float(np.sum(np.asarray(audio, dtype=np.float64) ** 2))


aligner_executor = Halves(lambda batch: [p.payload for p in batch.plans],
                          lambda chunks: torch.tensor([energy(a) for a in chunks], dtype=torch.float64),
                          lambda host, batch: [float(v) for v in np.asarray(host)[: len(batch.plans)]])


class TwoLoopFamily:
    name = "twoloop"
    device = torch.device("cpu")
    sample_rate, channels, code_width, codebook_size = SAMPLE_RATE, 1, 1, TALK_VOCAB
    frame_rate = SAMPLE_RATE / HOP
    speakers: tuple[str, ...] = ()
    sampling_keys: tuple[str, ...] = ()
    request_fields = frozenset({"prompt", "talker_prefix", "tokens", "stream", "timeout", "voice"})
    weight_names: Any = None

    def __init__(self, card: TwoLoopCard) -> None:
        self.card = card
        th, tk, codec = card.loops.thinker, card.loops.talker, card.loops.codec
        torch.manual_seed(card.model.seed)
        self.models = nn.ModuleDict({
            THINKER: Stack(config(th.hidden, th.layers, THINK_VOCAB), [THINK_VOCAB], THINK_VOCAB),
            TALKER: Stack(config(tk.hidden, tk.layers, TALK_VOCAB), [THINK_VOCAB + 1, TALK_VOCAB + 1], TALK_VOCAB),
        }).eval()
        self.weights = self.models
        blocks = {n: s.kv_blocks or s.max_running * s.max_blocks for n, s in ((THINKER, th), (TALKER, tk))}
        self.think = LoopExec(self.models[THINKER], config(th.hidden, th.layers, THINK_VOCAB), th,
                              num_blocks=blocks[THINKER], talker=False)
        self.talk = LoopExec(self.models[TALKER], config(tk.hidden, tk.layers, TALK_VOCAB), tk,
                             num_blocks=blocks[TALKER], talker=True)
        self.think_loop = ARLoop[ARSequence](th, THINKER, "thinker", prefill=Work.THINK_PREFILL, frame=Work.THINK_TOKEN)
        self.talk_loop = TalkerLoop(tk, TALKER, "talker", prefill=Work.TALK_PREFILL, frame=Work.TALK_FRAME)
        loops: dict[Hashable, Any] = {THINKER: self.think_loop, TALKER: self.talk_loop}
        pools: dict[Hashable, tuple[str, ...]] = {THINKER: ("think",), TALKER: ("talk",)}
        self.pools = {"think": th.max_running, "talk": tk.max_running}
        self.codec = Codec()
        self.codec_loop = ChunkLoop(codec, CODEC, "codec") if codec is not None else None
        if self.codec_loop is not None and codec is not None:
            loops[CODEC], pools[CODEC] = self.codec_loop, ("codec",)
            self.pools["codec"] = codec.max_streams
        if card.loops.aligner is not None:
            loops[ALIGNER] = AlignLoop()
        edges = [(name, list(decl.feeds)) for name, decl in card.loops.driven()]
        self.graph = LoopGraph.declared(edges, loops, pools, paged=(THINKER, TALKER),
                                        audio=CODEC if self.codec_loop is not None else None)
        think_prefill, think_token = self.think.executors()
        talk_prefill, talk_frame = self.talk.executors()
        self.executors: dict[Hashable, Any] = {Work.THINK_PREFILL: think_prefill, Work.TALK_PREFILL: talk_prefill,
                                               Work.THINK_TOKEN: think_token, Work.TALK_FRAME: talk_frame}
        if self.codec_loop is not None:
            self.executors[WorkUnitKind.AUDIO_CHUNK] = Halves(self.codec.pack, self.codec.launch, self.codec.read)
        if card.loops.aligner is not None:
            self.executors[Align.ALIGN] = aligner_executor
        self.buckets: dict[Hashable, list[int]] = {}
        self.kv_specs = {THINKER: KVSpec(blocks[THINKER], th.block_size, th.max_blocks, th.prefix_cache),
                         TALKER: KVSpec(blocks[TALKER], tk.block_size, tk.max_blocks, tk.prefix_cache)}
        self.prefill_budget = th.prefill_chunk_rows
        self.max_waiting, self.max_buffered_chunks = th.max_waiting, th.max_buffered_chunks
        self.outputs: dict[int, dict[Hashable, Any]] = {}  # request id -> each loop's result (the tests read them)

    # ----- the engine thread ---------------------------------------------------------------------
    def bind(self, launch: Any) -> None:
        self.think.launch_state = self.talk.launch_state = launch

    def thread_setup(self) -> None:
        pass

    def paged_kv(self) -> dict[Hashable, PagedKV]:
        return {THINKER: PagedKV(self.kv_specs[THINKER], self.think, think_rows, Work.THINK_PREFILL),
                TALKER: PagedKV(self.kv_specs[TALKER], self.talk, lambda s: talk_rows(self.talk_loop, s),
                                Work.TALK_PREFILL)}

    def front_start(self, slots: list[int]) -> None:
        pass

    def encoded(self, record: Any) -> Tensor | None:
        return record.rows

    def needs(self, record: Any) -> Needs:
        req: TwoLoopRequest = record.request
        slots = {"think": 1, "talk": 1}
        if self.codec_loop is not None:
            slots["codec"] = 1
        return Needs(slots, kv_rows=len(req.prompt) + req.tokens,
                     loop_rows={TALKER: len(req.talker_prefix) + 1 + req.tokens})

    def start(self, record: Any, slots: Mapping[str, int], share_from: int | None) -> dict[Hashable, LoopState]:
        req: TwoLoopRequest = record.request
        rows = record.rows
        states: dict[Hashable, LoopState] = {
            THINKER: ARSequence(record.id, rows=rows, prompt_len=int(rows.shape[0]), max_frames=req.tokens,
                                floor=NEVER, slot=slots["think"]),
            TALKER: TalkerState(record.id, max_frames=self.card.loops.talker.max_frames, floor=NEVER,
                                slot=slots["talk"]),
        }
        if self.codec_loop is not None:
            states[CODEC] = self.codec_loop.init(record.id, sample_rate=SAMPLE_RATE, slot=slots["codec"])
        if ALIGNER in self.graph.specs:
            states[ALIGNER] = AlignState(record.id)
        return states

    def admitted(self, record: Any) -> None:
        pass

    def more_input(self, record: Any, loop: Hashable | None) -> Tensor | None:
        """The talker's prompt once the thinker's first token arrived: the prefix's rows, then that token's."""
        if loop != TALKER:
            return None
        state: TalkerState = record.states[TALKER]
        if state.rows is not None or not state.tokens:
            return None
        first = torch.tensor([[state.tokens[0] + 1, BOS]], dtype=torch.long)
        rows = torch.cat([record.work.prefix, first])
        state.rows, state.prompt_len, state.paused = rows, int(rows.shape[0]), True  # waits for KV blocks
        return rows

    def spoken(self, record: Any) -> Spoken:
        """What a request speaks, for a loop added to the card (`v2.runtime.added.SpokenInput`): its prompt's ids."""
        return Spoken(None, tuple(record.request.prompt))

    def recompute_rows(self, state: LoopState) -> Tensor:
        return think_rows(state)  # type: ignore[arg-type]

    def result(self, record: Any, outputs: Mapping[Hashable, Any], reason: FinishReason, now: float) -> SpeechResult:
        self.outputs[record.id] = dict(outputs)
        chunks = outputs[CODEC].chunks if CODEC in outputs else []
        audio = np.concatenate([c.audio for c in chunks], axis=1) if chunks else np.zeros((1, 0), np.float32)
        talk = outputs.get(TALKER)
        codes = np.array(talk.codes if talk is not None else [], dtype=np.int64).reshape(-1, 1)
        return SpeechResult(audio, SAMPLE_RATE, codes, reason.value,
                            Metrics(0, len(codes), audio.shape[1] / SAMPLE_RATE, None, now - record.submitted, 0.0),
                            error=record.error)

    def stats(self) -> dict[str, Any]:
        return {}

    # ----- the caller's side ---------------------------------------------------------------------
    def parse(self, request: Any) -> TwoLoopRequest:
        if isinstance(request, TwoLoopRequest):
            return request
        req = TwoLoopRequest(**{k: tuple(v) if k in ("prompt", "talker_prefix") else v for k, v in request.items()})
        th = self.card.loops.thinker
        for name, ids in (("prompt", req.prompt), ("talker_prefix", req.talker_prefix)):
            if not ids or len(ids) > th.max_prompt_rows or any(not 0 <= i < THINK_VOCAB for i in ids):
                raise ValueError(f"{name}: 1 to {th.max_prompt_rows} ids in [0, {THINK_VOCAB})")
        if not 1 <= req.tokens <= min(th.max_frames, self.card.loops.talker.max_frames):
            raise ValueError(f"tokens: 1 to {th.max_frames}")
        return req

    def prepare(self, request: TwoLoopRequest, *, voice: Any = None) -> Prepared:
        rows = torch.tensor(request.prompt, dtype=torch.long).reshape(-1, 1)
        prefix = torch.tensor([[i + 1, 0] for i in request.talker_prefix], dtype=torch.long).reshape(-1, 2)
        return Prepared(rows, prefix)

    def check_group(self, group: Any) -> None:
        raise ValueError("n: the two-loop test family shares no prompt")

    def read_input(self, source: object) -> object:
        raise ValueError("the two-loop test family takes no recordings")

    def front_state(self, request_id: int, inputs: tuple[object, ...]) -> Any:
        raise ValueError("the two-loop test family has no front loop")


class Factory(FactoryBase[TwoLoopCard]):
    name = "twoloop"
    bound = staticmethod(lambda card, *experts, graphs=True, **named: TwoLoopFamily(card))  # type: ignore[assignment]

    def experts(self, card: TwoLoopCard, **options: Any) -> dict[str, object]:
        return {}

    def voice_spec(self, card: TwoLoopCard, checkpoint: str | None = None) -> VoiceSpec:
        return VoiceSpec(1, TALK_VOCAB, {})

    def precheck(self, card: TwoLoopCard, fields: Mapping[str, object], checkpoint: str | None = None) -> None:
        pass


FAMILY = Factory()
