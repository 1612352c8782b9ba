"""MOSS-TTS-Local bound for the runtime: the `v2.runtime.family.Family` of this family (`FAMILY` binds it).

Owns: building the experts a card names (`experts`), what the checkpoint's config.json alone decides
(`voice_spec`: what its stored voices carry), and `MossFamily`: the loop graph its card declares
(`ar_decode` -> `vocoder`, or `ar_decode` alone: no audio; `encode` in front; `ar_decode` holds the paged
KV), the executors registered per work kind (PREFILL and AR_FRAME: `ARExecutor.executors()`, the runtime's
frame plumbing; AUDIO_CHUNK: `CodecExecutor.executor()`, only with the vocoder loop; ENCODE: `EncodeExecutor`'s
halves, only with the codec's encoder), the slot pools
(`kv`, `codec`, `encode`), the KV pool's geometry, and the family's side
of a request's life: parsing and preparing it, its loops' states at admission (each made by its loop, with
its slot), device state at admission, the prompt laid out again once references are encoded, the next
segment's carried prompt, the rows a preempted request recomputes, and the result; open requests (text fed
while they run) through `open_text.OpenText`.
Must not know: the engine's queues, scheduling policy, threads (device state changes are queued through
the `launch` the engine binds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Hashable, Mapping, Sequence

import torch

from v2.contracts import FinishReason, LoopState, WorkUnitKind
from v2.errors import RequestError
from v2.kit.checks import check_one_segment, shared_prompt
from v2.families.moss_tts_local.kinds import LoopKind
from v2.families.moss_tts_local import results, segments
from v2.families.moss_tts_local.ar_decode import ARDecodeLoop, ARState
from v2.families.moss_tts_local.ar_executor import ARExecutor, OnStream
from v2.families.moss_tts_local.card import (
    MossCard, build_codec, build_encoder, build_model, build_tokenizer, checkpoint_config,
)
from v2.families.moss_tts_local.codec_executor import CodecExecutor
from v2.families.moss_tts_local.encode import EncodeLoop, EncodeState
from v2.families.moss_tts_local.encode_executor import EncodeExecutor
from v2.families.moss_tts_local.open_text import OpenText, OpenWork
from v2.runtime.added import Spoken
from v2.families.moss_tts_local.params import SPEECH_PARAMS
from v2.families.moss_tts_local.long_text import build_rows
from v2.families.moss_tts_local.prepare import CodecSpec, prepare, prepare_recording
from v2.families.moss_tts_local.request import SamplingParams, SpeechRequest, parse_request
from v2.families.moss_tts_local.vocoder import VocoderLoop, VocoderState
from v2.families.moss_tts_local.weights import NAMES
from v2.models.kv_cache import PagedKVCache
from v2.runtime.family import (
    AnyExecutor, Factory, FactoryBase, Halves, LaunchState, Prepared, Request, TextInput, VoiceSpec,
)
from v2.kit.paged_family import PagedFamily, graph_stats, pool_blocks

if TYPE_CHECKING:
    import numpy as np

    from v2.models.moss_codec.decoder import MossAudioDecoder
    from v2.models.moss_codec.encoder import MossAudioEncoder
    from v2.models.moss_tts_local.model import MossTTSLocal
    from v2.models.moss_tts_local.tokenizer import TextTokenizer
    from v2.runtime.handles import SpeechResult
    from v2.runtime.records import RequestRecord
    from v2.runtime.family import StoredVoice

AR, VOC = LoopKind.AR_DECODE, LoopKind.VOCODER


class MossFamily(PagedFamily):
    name = "moss_tts_local"
    weight_names = NAMES
    speakers: tuple[str, ...] = ()  # no built-in voices: a voice is a reference or a stored voice
    request_fields = frozenset(SpeechRequest.model_fields)
    sampling_keys = tuple(SamplingParams.model_fields)  # a rollout's sampling options: its nested `sampling`
    speech_params = SPEECH_PARAMS  # how a server's `SpeechParams` become this family's request (params.py)

    def __init__(self, card: MossCard, model: MossTTSLocal, codec: MossAudioDecoder, tokenizer: TextTokenizer, *,
                 encoder: MossAudioEncoder | None = None, graphs: bool = True) -> None:
        ar, voc, enc = card.loops.ar_decode, card.loops.vocoder, card.loops.encode
        self.card, self.model, self.codec, self.tokenizer, self.encoder = card, model, codec, tokenizer, encoder
        self.name = card.family  # what its trajectories name (the registry finds the recompute by it)
        self.device, self.weights = model.device, model
        self.code_width, self.codebook_size = model.cfg.n_vq, model.cfg.codebook_size
        self.sample_rate, self.channels = codec.sample_rate, codec.cfg.channels
        self.frame_rate = codec.sample_rate / codec.cfg.hop  # 12.5 frames per second
        self._launch: LaunchState = lambda work: work()  # until the engine binds its stream
        self.ar_loop = ARDecodeLoop(ar)
        self.codec_loop = VocoderLoop(voc) if voc is not None else None  # the card declares it (else: no audio)
        self.enc_loop = EncodeLoop(enc.chunk_frames)
        per_block = PagedKVCache.block_bytes(model.cfg.backbone, ar.block_size, model.dtype)
        blocks = pool_blocks(ar, model.device, per_block, advice="; raise it or lower max_prompt_rows / max_frames")
        self.ar_exec = ARExecutor(model, num_slots=ar.max_running, max_len=ar.max_prompt_rows + ar.max_frames,
                                  batch_buckets=ar.batch_buckets, graphs=graphs, num_blocks=blocks,
                                  block_size=ar.block_size)
        self.ar_calls = OnStream(self.ar_exec, lambda work: self._launch(work))
        self.codec_exec: CodecExecutor | None = (CodecExecutor(codec, num_slots=voc.max_streams, batch_buckets=voc.batch_buckets,
                                                      frame_buckets=voc.frame_buckets, graphs=graphs)
                                                      if voc is not None else None)
        self.encode_exec = EncodeExecutor(encoder, enc.max_streams) if encoder is not None else None
        self.codec_spec = CodecSpec(encoder.sample_rate, encoder.cfg.hop) if encoder is not None else None
        # the graph the card declares: its loops and edges (ar_decode -> vocoder, or ar_decode alone: no audio)
        self.graph = self.declared_graph(AR, self.ar_loop, self.enc_loop if encoder is not None else None,
                                         names=LoopKind)
        self.executors: dict[Hashable, AnyExecutor] = {}
        if self.encode_exec is not None:  # without the encoder reference audio is refused at submit
            e = self.encode_exec
            self.executors[WorkUnitKind.ENCODE] = Halves(e.pack, e.launch, e.read)
        self.executors |= self.ar_exec.executors()
        self.buckets: dict[Hashable, list[int]] = {WorkUnitKind.AR_FRAME: ar.batch_buckets}
        self.pools = {"kv": ar.max_running, **({"codec": voc.max_streams} if voc is not None else {}),
                      "encode": enc.max_streams}
        if voc is not None and self.codec_exec is not None:  # audio work only where the card declares the vocoder loop
            self.executors[WorkUnitKind.AUDIO_CHUNK] = self.codec_exec.executor()
            self.buckets[WorkUnitKind.AUDIO_CHUNK] = voc.batch_buckets
        self.paged_limits(ar, self.ar_exec.kv.num_blocks)
        self.kv_ops = self.ar_calls
        self.opened = OpenText(card, model.cfg, tokenizer, self.codec_spec, self.ar_loop, self.codec_loop, self.ar_calls)

    # ----- submit --------------------------------------------------------------------------------
    def parse(self, request: object) -> SpeechRequest:
        return parse_request(request)

    def prepare(self, request: Request, *, voice: StoredVoice | None = None) -> Prepared:
        assert isinstance(request, SpeechRequest)  # what `parse` made
        return prepare(request, self.card, self.model.cfg, self.tokenizer, codec=self.codec_spec, voice=voice)

    def check_group(self, group: Sequence[tuple[Request, Prepared]]) -> None:
        """Requests (request, prepared) that share one prompt: `check_group_size`'s bounds, one prompt for all,
        no recording to encode, one segment."""
        first = shared_prompt(group, self.check_group_size)
        if first.audio:
            raise RequestError("reference_audio: a group shares one prompt; store the voice once "
                               "(rt.voices.add) and pass voice=NAME, or pass reference_codes", field="reference_audio")
        check_one_segment(first)

    def open_text(self, request: object, *, voice: StoredVoice | None = None,
                  split: str = "sentence") -> tuple[SpeechRequest, OpenWork]:
        """An open request checked (its text arrives through `feed`)."""
        return self.opened.open_text(request, voice=voice, split=split)

    def feed(self, request: Request, work: Prepared, text: str, *, end: bool = False) -> bool:
        """A piece of an open request's text (the caller's thread): the segments it completes, laid out."""
        assert isinstance(work, OpenWork) and isinstance(request, SpeechRequest)  # what `open_text` made
        return self.opened.feed(request, work, text, end=end)

    def read_input(self, source: object) -> np.ndarray:
        return prepare_recording(source, self.card, self.codec_spec)

    def front_state(self, request_id: int, inputs: tuple[object, ...]) -> EncodeState:
        assert self.codec_spec is not None
        return self.enc_loop.init(request_id, inputs, self.codec_spec.hop)

    def front_start(self, slots: list[int]) -> None:
        executor = self.encode_exec
        assert executor is not None
        self._launch(lambda: executor.start(slots))

    def spoken(self, record: RequestRecord) -> Spoken:
        """What a request speaks (`SpokenInput`, for a loop added to the graph): an open request's text as fed
        so far, else its `text` (`prompt_rows`: none)."""
        work = record.work
        if isinstance(work, OpenWork):
            return Spoken(work.text.text)
        text = getattr(record.request, "text", None)
        return Spoken(text if isinstance(text, str) else None)

    def encoded(self, record: RequestRecord) -> torch.Tensor | None:
        """The prompt again, with the real codes of the request's recordings (an open request's: once its first
        segment is cut; None before)."""
        work, front, request = record.work, record.front, record.request
        assert isinstance(front, EncodeState) and isinstance(request, SpeechRequest)
        references = tuple(torch.from_numpy(c) for c in self.enc_loop.finalize(front))
        if isinstance(work, OpenWork):
            return self.opened.first_prompt(record, references)
        return build_rows(request, self.model.cfg, self.tokenizer, references, work.transcript,
                          work.segments[0].text if work.segments else None)

    # ----- admission and after -------------------------------------------------------------------
    def start(self, record: RequestRecord, slots: Mapping[str, int],
              share_from: int | None) -> dict[Hashable, LoopState]:
        work, request = record.work, record.request
        assert isinstance(request, SpeechRequest)
        opened = isinstance(work, OpenWork)
        caps = () if opened else tuple(s.max_frames for s in work.segments[1:])
        ar = self.ar_loop.init(record.id, record.rows, max_frames=work.max_frames, min_frames=request.min_frames,
                               segment_caps=caps, slot=slots["kv"], open_text=opened)
        if share_from is not None:
            self.ar_loop.share(ar, share_from)
        if opened:
            self.opened.started(record)
        else:
            record.handle.segments = (0, max(1, len(work.segments)))
        return self.with_codec(record, slots, {AR: ar})

    def admitted(self, record: RequestRecord) -> None:
        """The request's slot settings and seed; fresh codec state for its stream."""
        ar, request = record.states[AR], record.request
        assert isinstance(ar, ARState) and isinstance(request, SpeechRequest)
        self.ar_calls.admit(ar.slot, record.work.sampling, request.seed)
        self.admit_codec(record)

    def recompute_rows(self, state: LoopState) -> torch.Tensor:
        assert isinstance(state, ARState)  # the paged loop's: the AR loop's own state
        return segments.recompute_rows(state, self.model.cfg.ids.audio_assistant_slot)

    def more_input(self, record: RequestRecord, loop: Hashable | None) -> torch.Tensor | None:
        """The next segment's prompt (the AR loop waits for it once a segment another follows has ended); for
        an open request also its first prompt (`loop` None), or None while its text has not given it."""
        if isinstance(record.work, OpenWork) and loop is None:
            front = record.front
            assert front is None or isinstance(front, EncodeState)
            references = None if front is None else tuple(torch.from_numpy(c) for c in self.enc_loop.finalize(front))
            return self.opened.first_prompt(record, references)
        ar, voc = record.states[AR], record.states.get(VOC)
        assert isinstance(ar, ARState) and (voc is None or isinstance(voc, VocoderState))
        if isinstance(record.work, OpenWork):
            return self.opened.next_segment(record, ar, voc)
        return segments.next_segment(record, ar, self.ar_loop, self.ar_calls, self.model.cfg.ids.audio_assistant_slot)

    def result(self, record: RequestRecord, outputs: Mapping[Hashable, Any], reason: FinishReason,
               now: float) -> SpeechResult:
        return results.build_result(record, outputs.get(AR), outputs.get(VOC), reason, now,
                                    channels=self.codec.cfg.channels, sample_rate=self.codec.sample_rate,
                                    groups=self.code_width, family=self.name, decoded=self.codec_loop is not None)

    def stats(self) -> dict[str, object]:
        return graph_stats(self.ar_exec, self.codec_exec)


class _Factory(FactoryBase[MossCard]):
    """`FAMILY`: `bind(card, model, codec, tokenizer, *, graphs=True, encoder=None)` is `MossFamily`'s;
    building the experts a card names (`experts`), and what config.json alone decides (`voice_spec`)."""

    name = "moss_tts_local"
    bound = MossFamily

    def experts(self, card: MossCard, *, checkpoint: str | None = None, codec_checkpoint: str | None = None,
                device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> dict[str, object]:
        model = build_model(card, checkpoint=checkpoint, dtype=dtype, device=device)
        codec = build_codec(card, checkpoint=codec_checkpoint, dtype=dtype, device=device)
        encoder = (build_encoder(card, checkpoint=codec_checkpoint, dtype=dtype, device=device, decoder=codec)
                   if card.experts.vocoder.encoder else None)
        return {"model": model, "codec": codec, "tokenizer": build_tokenizer(card, checkpoint), "encoder": encoder}

    def voice_spec(self, card: MossCard, checkpoint: str | None = None) -> VoiceSpec:
        """From config.json alone: `n_vq` codes per frame of `codebook_size`; a voice carries codes alone."""
        cfg = checkpoint_config(card, checkpoint)
        return VoiceSpec(cfg.n_vq, cfg.codebook_size, {})

    def precheck(self, card: MossCard, fields: Mapping[str, object], checkpoint: str | None = None) -> None:
        """Nothing the config decides: `language` is any text, put into the prompt as written."""


FAMILY: Factory[MossCard] = _Factory()  # the checker holds `bind`'s family to the runtime's protocols (`Family`)

if TYPE_CHECKING:
    def _takes_text(family: MossFamily) -> TextInput:  # the checker holds the optional part to its protocol
        return family
__all__ = ["FAMILY", "MossFamily"]
