"""Qwen3-Omni bound for the runtime: the `v2.runtime.family.Family` of this family (`FAMILY` binds it).

Owns: building the expert a card names (`experts`: the thinker, talker and code2wav of one checkpoint and its
tokenizer), what the checkpoint's config alone decides (`voice_spec`, `precheck`: an unknown speaker), and
`OmniFamily`: the loop graph its card declares (`thinker` -> `talker` -> `code2wav`; the thinker publishes its
text deltas; the audio encoder in front, front.py), both paged KV pools (`thinker`, `talker`), the executors per
work kind, the slot pools (`think`, `talk`, `c2w`, `audio`), and the family's side of a request's life: parsing
and preparing it (prepare.py), the encoded clips' rows (`encoded`), its loops' states at admission (a text-only
request's talker and code2wav start ended), the device state at admission (each loop's sampling and seed, the
prompt's audio rows, fresh code2wav state), the talker's prompt once the thinker's first token exists (with the
thinker's A rows handed to the talker's slot), the rows a preempted request recomputes, and the result (text, text
ids, codes, audio).
Must not know: the engine's queues, scheduling policy, threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Hashable, Mapping, Sequence

import torch

from v2.contracts import FinishReason, LoopState, WorkUnitKind
from v2.errors import RequestError
from v2.families.qwen3_omni.card import OmniCard, build_parts, build_tokenizer, checkpoint_config
from v2.families.qwen3_omni.chat_audio import FORMATS
from v2.families.qwen3_omni.front import AudioExecutor, AudioInput, AudioLoop, AudioState, FrontWork
from v2.families.qwen3_omni.executors import Code2WavExecutor, TalkerFrames, ThinkerFrames, executors_as
from v2.families.qwen3_omni.loops import (
    CODE2WAV, TALKER, THINKER, TalkerLoop, TalkerState, ThinkerLoop, ThinkerState, Work, talker_rows, thinker_rows,
)
from v2.families.qwen3_omni.prepare import OmniWork, prepare
from v2.families.qwen3_omni.request import OmniRequest, parse
from v2.families.qwen3_omni.results import build_result
from v2.families.qwen3_omni.weights import NAMES
from v2.kit.checks import shared_prompt
from v2.kit.chunks import ChunkLoop
from v2.kit.frames import OnStream
from v2.kit.paged_family import pool_blocks
from v2.models.kv_cache import PagedKVCache
from v2.runtime.family import (
    AnyExecutor, FactoryBase, FrontState, KVSpec, LaunchState, LoopGraph, Needs, PagedKV, Prepared, Request,
    StoredVoice, VoiceSpec,
)
from v2.runtime.added import Spoken
from v2.runtime.handles import SpeechResult

if TYPE_CHECKING:
    from v2.families.qwen3_omni.chat_tokenizer import ChatTokenizer
    from v2.families.qwen3_omni.models import FedTalker, RuntimeThinker
    from v2.models.qwen3_omni.code2wav import Code2Wav
    from v2.models.qwen3_omni.config import Qwen3OmniConfig
    from v2.runtime.records import RequestRecord


def _request(record: RequestRecord) -> OmniRequest:
    request = record.request
    assert isinstance(request, OmniRequest)  # what this family's `parse` made
    return request


class OmniFamily:
    name = "qwen3_omni"
    request_fields = frozenset(OmniRequest.model_fields)
    sampling_keys: tuple[str, ...] = ()
    input_audio_formats = FORMATS  # what a message's input_audio part may say as its format (chat_audio.py)
    weight_names = NAMES
    channels = 1

    def __init__(self, card: OmniCard, thinker: RuntimeThinker, talker: FedTalker | None, code2wav: Code2Wav | None,
                 config: Qwen3OmniConfig, tokenizer: ChatTokenizer | None = None, *, graphs: bool = True) -> None:
        th, tk, cw = card.loops.thinker, card.loops.talker, card.loops.code2wav
        self.card, self.cfg, self.tokenizer, self.thinker = card, config, tokenizer, thinker
        self.device, self.weights = thinker.device, torch.nn.ModuleDict(
            {k: v for k, v in (("thinker", thinker), ("talker", talker), ("code2wav", code2wav)) if v is not None})
        ids = config.ids
        self.sample_rate = code2wav.sample_rate if code2wav is not None else 24_000
        self.frame_rate = self.sample_rate / code2wav.hop if code2wav is not None else 12.5
        self.code_width = config.talker.num_code_groups if config.talker is not None else 16
        self.codebook_size = config.talker.codebook_size if config.talker is not None else 2048
        self.speakers = tuple(n.capitalize() for n, _ in config.talker.speakers) if config.talker else ()
        self.max_reply_tokens = th.max_frames  # a request's max_tokens at most (prepare.py refuses more)
        self._launch: LaunchState = lambda work: work()
        self.think_loop = ThinkerLoop(th, tokenizer.decode if tokenizer is not None else None)
        self.talk_loop = TalkerLoop(tk)
        accept = config.talker.accept_hidden_layer if config.talker is not None else 0
        think_blocks = pool_blocks(th, self.device, PagedKVCache.block_bytes(thinker.cfg.text.decoder, th.block_size,
                                                                             thinker.dtype))
        self.think = ThinkerFrames(thinker, num_slots=th.max_running, max_len=th.max_prompt_rows + th.max_frames,
                                   batch_buckets=th.batch_buckets, num_blocks=think_blocks, block_size=th.block_size,
                                   accept_layer=accept, eos=ids.im_end, graphs=graphs)
        self.think_calls = OnStream(self.think, lambda work: self._launch(work))
        self.executors: dict[Hashable, AnyExecutor] = dict(executors_as(self.think, Work.THINK_PREFILL,
                                                                             Work.THINK_TOKEN))
        self.buckets: dict[Hashable, list[int]] = {Work.THINK_TOKEN: th.batch_buckets}
        self.pools = {"think": th.max_running}
        self.kv_specs = {THINKER: KVSpec(think_blocks, th.block_size, th.max_blocks, th.prefix_cache)}
        loops: dict[Hashable, Any] = {THINKER: self.think_loop}
        pools: dict[Hashable, tuple[str, ...]] = {THINKER: ("think",)}
        self.talk: TalkerFrames | None = None
        if talker is not None:
            talker.bind_text(thinker.model.embed_tokens.weight, (ids.tts_bos, ids.tts_eos, ids.tts_pad))
            talk_blocks = pool_blocks(tk, self.device, PagedKVCache.block_bytes(talker.cfg.talker.decoder,
                                                                                tk.block_size, talker.dtype))
            self.talk = TalkerFrames(talker, num_slots=tk.max_running, max_len=tk.max_prompt_rows + tk.max_frames,
                                     batch_buckets=tk.batch_buckets, num_blocks=talk_blocks,
                                     block_size=tk.block_size, graphs=graphs)
            self.talk_calls = OnStream(self.talk, lambda work: self._launch(work))
            self.executors |= executors_as(self.talk, Work.TALK_PREFILL, Work.TALK_FRAME)
            self.buckets[Work.TALK_FRAME] = tk.batch_buckets
            self.pools["talk"] = tk.max_running
            self.kv_specs[TALKER] = KVSpec(talk_blocks, tk.block_size, tk.max_blocks, tk.prefix_cache)
            loops[TALKER], pools[TALKER] = self.talk_loop, ("talk",)
        self.c2w_loop: ChunkLoop | None = None
        self.c2w: Code2WavExecutor | None = None
        if cw is not None and code2wav is not None and talker is not None:
            self.c2w_loop = ChunkLoop(cw, CODE2WAV, "code2wav")
            self.c2w = Code2WavExecutor(code2wav, num_slots=cw.max_streams, batch_buckets=cw.batch_buckets,
                                        frame_buckets=cw.frame_buckets, graphs=graphs)
            self.executors[WorkUnitKind.AUDIO_CHUNK] = self.c2w.executor()
            self.buckets[WorkUnitKind.AUDIO_CHUNK] = cw.batch_buckets
            self.pools["c2w"] = cw.max_streams
            loops[CODE2WAV], pools[CODE2WAV] = self.c2w_loop, ("c2w",)
        self.audio_loop = AudioLoop()  # front work: the prompt's clips through the audio encoder
        self.executors[FrontWork.AUDIO_ENCODE] = AudioExecutor(thinker).executor()
        self.pools["audio"] = th.audio_streams
        edges = [(n, list(d.feeds)) for n, d in card.loops.driven() if n in loops]
        paged = tuple(n for n in (THINKER, TALKER) if n in loops)
        self.graph = LoopGraph.declared(edges, loops, pools, paged=paged,  # type: ignore[arg-type]
                                        audio=CODE2WAV if CODE2WAV in loops else None, publishes=(THINKER,),
                                        front=self.audio_loop, front_pool="audio")
        self.prefill_budget, self.max_waiting = th.prefill_chunk_rows, th.max_waiting
        self.max_buffered_chunks = th.max_buffered_chunks

    # ----- the engine thread ---------------------------------------------------------------------
    def bind(self, launch: LaunchState) -> None:
        self._launch = launch

    def thread_setup(self) -> None:
        threads = self.card.runtime.cpu_threads
        if threads is not None and self.device.type == "cpu":
            torch.set_num_threads(threads)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)

    def front_start(self, slots: list[int]) -> None:
        pass

    def paged_kv(self) -> dict[Hashable, PagedKV]:
        out: dict[Hashable, PagedKV] = {THINKER: PagedKV(self.kv_specs[THINKER], self.think_calls,
                                                         self.recompute_rows, Work.THINK_PREFILL)}
        if self.talk is not None:
            loop = self.talk_loop
            out[TALKER] = PagedKV(self.kv_specs[TALKER], self.talk_calls,
                                  lambda s: talker_rows(loop, s),  # type: ignore[arg-type]
                                  Work.TALK_PREFILL)
        return out

    def spoken(self, record: RequestRecord) -> Spoken:
        """What the reply speaks so far (`SpokenInput`, for a loop added to the graph, e.g. a word aligner): the
        thinker's text ids (every one is spoken) and their text where the checkpoint has a tokenizer."""
        state = record.states.get(THINKER)
        ids = tuple(int(c[0]) for c in state.codes) if isinstance(state, ThinkerState) else ()
        return Spoken(self.tokenizer.decode(list(ids)) if self.tokenizer is not None else None, ids)

    def encoded(self, record: RequestRecord) -> torch.Tensor | None:
        """The front loop has encoded the prompt's clips: their rows join the work (the thinker's slot takes them
        at admission)."""
        front = record.front
        if isinstance(front, AudioState) and front.rows is not None:
            record.work.audio_rows = front.rows
        return record.work.rows

    def _speaks(self, record: RequestRecord) -> bool:
        return bool(_request(record).decodes_speech) and self.talk is not None

    def needs(self, record: RequestRecord) -> Needs:
        work: OmniWork = record.work
        slots = {"think": 1}
        rows: dict[Hashable, int] = {}
        if self._speaks(record):
            slots["talk"] = 1
            if self.c2w_loop is not None:
                slots["c2w"] = int(_request(record).decode_audio)
            assert work.talker_prefix is not None
            rows[TALKER] = int(work.talker_prefix.shape[0]) + work.max_frames
        return Needs(slots, kv_rows=int(work.rows.shape[0]) + work.max_tokens, loop_rows=rows)

    def start(self, record: RequestRecord, slots: Mapping[str, int], share_from: int | None) -> dict[Hashable, LoopState]:
        work: OmniWork = record.work
        speaks, ids = self._speaks(record), self.cfg.ids
        states: dict[Hashable, LoopState] = {
            THINKER: ThinkerState(record.id, rows=work.rows, prompt_len=int(work.rows.shape[0]),
                                  max_frames=work.max_tokens, slot=slots["think"])}
        if share_from is not None:  # a group member: it takes the leader's prefilled prompt
            self.think_loop.share(states[THINKER], share_from)  # type: ignore[arg-type]
        if self.talk is not None:
            talker = TalkerState(record.id, max_frames=work.max_frames, slot=slots.get("talk", -1),
                                 eos_text=ids.tts_eos, pad_text=ids.tts_pad)
            if not speaks:
                talker.rows, talker.finish = work.rows[:0], FinishReason.STOP  # text only: never runs
            states[TALKER] = talker
        if self.c2w_loop is not None:
            c2w = self.c2w_loop.init(record.id, sample_rate=self.sample_rate,
                                     enabled=speaks and _request(record).decode_audio, slot=slots.get("c2w", -1))
            if not speaks:
                c2w.finish = FinishReason.STOP
            states[CODE2WAV] = c2w
        return states

    def admitted(self, record: RequestRecord) -> None:
        work: OmniWork = record.work
        seed = _request(record).seed
        self.think_calls.admit(record.slots["think"], work.thinker_sampling, seed, work.audio_rows)
        if self._speaks(record) and self.talk is not None:
            talk, slot = self.talk, record.slots["talk"]
            self.talk_calls.admit(slot, work.talker_sampling, seed, None)
            self._launch(lambda: talk.set_accept(slot, None))
            if self.c2w is not None and "c2w" in record.slots and _request(record).decode_audio:
                c2w, cslot = self.c2w, record.slots["c2w"]
                self._launch(lambda: c2w.admit(cslot))

    def more_input(self, record: RequestRecord, loop: Hashable | None) -> torch.Tensor | None:
        """The talker's prompt once the thinker's first token exists: its prefix with that token's row last."""
        if loop != TALKER:
            return None
        state = record.states[TALKER]
        assert isinstance(state, TalkerState)
        if state.rows is not None or not state.tokens or state.finish is not None:
            return None
        rows = record.work.talker_prefix.clone()
        rows[-1, 0] = state.tokens[0]
        state.rows, state.prompt_len, state.paused = rows, int(rows.shape[0]), True  # waits for KV blocks
        if record.work.audio_rows is not None and self.talk is not None:
            think, talk, ts, ks = self.think, self.talk, record.slots["talk"], record.slots["think"]
            self._launch(lambda: talk.set_accept(ts, think.accept.get(ks)))
        return rows

    def recompute_rows(self, state: LoopState) -> torch.Tensor:
        return thinker_rows(state)  # type: ignore[arg-type]

    def result(self, record: RequestRecord, outputs: Mapping[Hashable, Any], reason: FinishReason, now: float) -> SpeechResult:
        return build_result(record, outputs.get(THINKER), outputs.get(TALKER) if self._speaks(record) else None,
                            outputs.get(CODE2WAV), reason, now, sample_rate=self.sample_rate, groups=self.code_width,
                            family=self.name, decode=self.tokenizer.decode if self.tokenizer is not None else None,
                            eos=self.cfg.ids.im_end)

    def stats(self) -> dict[str, Any]:
        return {}

    # ----- the caller's side ---------------------------------------------------------------------
    def parse(self, request: object) -> OmniRequest:
        return parse(request)

    def prepare(self, request: Request, *, voice: StoredVoice | None = None) -> Prepared:
        assert isinstance(request, OmniRequest)
        return prepare(request, self.card, self.cfg, self.tokenizer, speech_loops=self.talk is not None)

    def check_group(self, group: Sequence[tuple[Request, Prepared]]) -> None:
        """Requests sharing one thinker prompt (prefilled once; each then thinks and speaks on its own): at most
        the thinker's and talker's slots; no audio (its clips are encoded per request)."""
        if any(p.inputs for _, p in group):
            raise RequestError("audio: a group shares one prompt; a prompt with audio cannot be shared",
                               field="audio")
        shared_prompt(group, self._check_group_size)

    def _check_group_size(self, group: Sequence[tuple[Request, Prepared]]) -> None:
        if len(group) > min(self.pools.get("think", 0), self.pools.get("talk", len(group))):
            raise RequestError(f"n: a group of {len(group)} exceeds the card's max_running", field="n")

    def read_input(self, source: object) -> object:
        raise RequestError("audio: Qwen3-Omni takes audio as part of the prompt (audio or messages)", field="audio")

    def front_state(self, request_id: int, inputs: tuple[object, ...]) -> FrontState:
        (audio,) = inputs
        assert isinstance(audio, AudioInput)  # what `prepare` gave
        return self.audio_loop.init(request_id, audio)


class _Factory(FactoryBase[OmniCard]):
    name = "qwen3_omni"
    bound = OmniFamily

    def bind(self, card: OmniCard, *args: Any, **named: Any) -> Any:  # type: ignore[override]
        return OmniFamily(card, *args, **named)

    def experts(self, card: OmniCard, *, checkpoint: str | None = None, codec_checkpoint: str | None = None,
                device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> dict[str, object]:
        parts = build_parts(card, checkpoint=checkpoint, dtype=dtype, device=device)
        return {"thinker": parts.thinker, "talker": parts.talker, "code2wav": parts.code2wav, "config": parts.config,
                "tokenizer": build_tokenizer(card, checkpoint)}

    def voice_spec(self, card: OmniCard, checkpoint: str | None = None) -> VoiceSpec:
        cfg = checkpoint_config(card, checkpoint)
        return VoiceSpec(cfg.talker.num_code_groups if cfg.talker else 16, 2048, {})

    def precheck(self, card: OmniCard, fields: Mapping[str, object], checkpoint: str | None = None) -> None:
        speaker = fields.get("speaker")
        if isinstance(speaker, str) and speaker.strip():
            cfg = checkpoint_config(card, checkpoint)
            if cfg.talker is not None:
                try:
                    cfg.talker.speaker_id(speaker)
                except ValueError as e:
                    raise RequestError(str(e), field="speaker") from None


FAMILY = _Factory()
__all__ = ["FAMILY", "OmniFamily"]
