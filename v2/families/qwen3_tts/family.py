"""Qwen3-TTS 12 Hz bound for the runtime: the `v2.runtime.family.Family` of this family (`FAMILY` binds it).

Owns: building the experts a card names (`experts`: the talker checkpoint, its codec from `speech_tokenizer/`
unless given, the tokenizer from its files, the sampling defaults from its generation_config.json), what the
checkpoint's config.json alone decides (`voice_spec`: what its stored voices carry; `precheck`: an unknown
speaker or language refused before any weights load), and `Qwen3Family`: the loop graph its card declares
(`talker` -> `codec`, or `talker` alone: no audio; `encode` in front; `talker` holds the paged KV), the
executors per work kind (SPEAKER and ENCODE in front, PREFILL, AR_FRAME, AUDIO_CHUNK: no codec work without
the codec loop), the slot pools (`kv`, `codec`, `encode`), the KV pool's geometry, and the
family's side of a request's life: parsing it (`language` resolved onto the checkpoint's names, languages.py)
and preparing it (a stored voice: its codes and `x_vector`, `voice_arrays`; one from a precomputed x-vector,
`voice_from_embedding`), its loops' states at admission,
device state at admission (sampling, seed, x-vector, fresh codec state), the prompt laid out again once the
recording is encoded, the next segment's carried prompt (long text), the rows a preempted request recomputes,
and the result; open requests (text fed while they run, as trailing text rows) through `open_text.OpenText`.
Must not know: the engine's queues, scheduling policy, threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Hashable, Mapping, Sequence

import torch

from v2.contracts import FinishReason, LoopState, WorkUnitKind
from v2.errors import FieldError, RequestError
from v2.kit.checks import check_one_segment, shared_prompt
from v2.families.qwen3_tts import languages, results, segments
from v2.families.qwen3_tts.card import (
    Qwen3Card, build_codec, build_encoder, build_model, build_tokenizer, checkpoint_config, generation_config,
)
from v2.families.qwen3_tts.codec import CODEC, CodecLoop
from v2.families.qwen3_tts.codec_executor import CodecExecutor
from v2.families.qwen3_tts.encode import EncodeLoop, EncodeState, Qwen3Work
from v2.families.qwen3_tts.encode_executor import CodesExecutor, SpeakerExecutor
from v2.families.qwen3_tts.open_text import OpenText, OpenWork
from v2.runtime.added import Spoken
from v2.families.qwen3_tts.params import SPEECH_PARAMS
from v2.families.qwen3_tts.prepare import (
    CodecSpec, EncodeInput, check_speaker, prepare, read_recording, rows_of, with_encoded,
)
from v2.families.qwen3_tts.request import Qwen3Request, parse
from v2.families.qwen3_tts.sampling_names import SAMPLING_KEYS
from v2.families.qwen3_tts.talker import TALKER, TalkerLoop, TalkerState, recompute_rows
from v2.families.qwen3_tts.talker_executor import OnStream, TalkerExecutor
from v2.families.qwen3_tts.weights import NAMES
from v2.models.kv_cache import PagedKVCache
from v2.models.qwen3_tts.config import GenerationDefaults, Qwen3TTSConfig, Qwen3TTSSampling
from v2.runtime.family import (
    AnyExecutor, Factory, FactoryBase, FrontState, Halves, LaunchState, Prepared, Request, TextInput, VoiceArrays,
    VoiceSpec,
)
from v2.kit.paged_family import PagedFamily, pool_blocks
from v2.voices.arrays import check_embedding
from v2.sampling_settings import HeadSampling

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from v2.families.qwen3_tts.card import ByteIds
    from v2.models.qwen3_codec.decoder import Qwen3CodecDecoder
    from v2.models.qwen3_codec.encoder import Qwen3CodecEncoder
    from v2.models.qwen3_tts.model import Qwen3TTS
    from v2.models.qwen3_tts.tokenizer import Qwen3TTSTokenizer
    from v2.runtime.handles import SpeechResult
    from v2.runtime.records import RequestRecord
    from v2.runtime.family import StoredVoice


def sampling_defaults(card: Qwen3Card, generation: dict[str, Any] | None) -> Qwen3TTSSampling:
    """The card's sampling section, else generation_config.json over the reference API's hard defaults."""
    s = card.loops.talker.sampling
    if s is not None:
        return Qwen3TTSSampling(HeadSampling(s.talker.temperature, s.talker.top_k, s.talker.top_p),
                                HeadSampling(s.code_predictor.temperature, s.code_predictor.top_k, s.code_predictor.top_p),
                                s.repetition_penalty)
    return GenerationDefaults.from_dict(generation).sampling


def voice_arrays(cfg: Qwen3TTSConfig) -> dict[str, tuple[int, ...]]:
    """The arrays a stored voice carries: its x-vector (a talker row) where the checkpoint has a speaker
    encoder; none otherwise (such a checkpoint clones no voice)."""
    return {"x_vector": (cfg.talker.hidden_size,)} if cfg.speaker_encoder is not None else {}


class Qwen3Family(PagedFamily):
    name = "qwen3_tts"
    weight_names = NAMES
    request_fields = frozenset(Qwen3Request.model_fields) | {"sampling"}  # `sampling` nested: sampling_names.py
    sampling_keys = SAMPLING_KEYS  # a rollout's sampling options: its nested `sampling` (sampling_names.py)
    speech_params = SPEECH_PARAMS  # how a server's `SpeechParams` become this family's request (params.py)

    def __init__(self, card: Qwen3Card, model: Qwen3TTS, codec: Qwen3CodecDecoder,
                 tokenizer: Qwen3TTSTokenizer | ByteIds | None = None, *, encoder: Qwen3CodecEncoder | None = None,
                 generation: dict[str, Any] | None = None, graphs: bool = True) -> None:
        tk, cd, enc = card.loops.talker, card.loops.codec, card.loops.encode
        cfg = model.cfg
        if codec.cfg.groups != cfg.num_code_groups:
            raise ValueError(f"codec: {codec.cfg.groups} code groups, the talker makes {cfg.num_code_groups}")
        self.card, self.model, self.codec, self.tokenizer, self.encoder = card, model, codec, tokenizer, encoder
        self.name = card.family  # what its trajectories name (the registry finds the recompute by it)
        self.cfg, self.device, self.weights = cfg, model.device, model
        self.speakers: tuple[str, ...] = cfg.speaker_names  # `speaker` values, spelled as config.json's spk_id
        self.code_width, self.codebook_size = cfg.num_code_groups, cfg.code_predictor.codebook_size
        self.sample_rate, self.channels = codec.sample_rate, 1
        self.frame_rate = codec.sample_rate / codec.hop
        self.defaults = sampling_defaults(card, generation)
        self._launch: LaunchState = lambda work: work()
        self.talker_loop = TalkerLoop(tk)
        self.codec_loop = CodecLoop(cd) if cd is not None else None  # the card declares it (else: no audio)
        per_block = PagedKVCache.block_bytes(cfg.talker.decoder, tk.block_size, model.dtype)
        blocks = pool_blocks(tk, model.device, per_block)
        self.frames = TalkerExecutor(model, num_slots=tk.max_running, max_len=tk.max_prompt_rows + tk.max_frames,
                                     batch_buckets=tk.batch_buckets, num_blocks=blocks, block_size=tk.block_size,
                                     graphs=graphs)
        self.calls = OnStream(self.frames, lambda work: self._launch(work))
        self.codec_exec = (CodecExecutor(codec, num_slots=cd.max_streams, batch_buckets=cd.batch_buckets,
                                         frame_buckets=cd.frame_buckets, graphs=graphs) if cd is not None else None)
        speaker = cfg.speaker_encoder
        self.codec_spec = CodecSpec(codec.sample_rate, codec.hop, speaker.sample_rate if speaker else codec.sample_rate,
                                    encoder is not None)
        self.enc_loop = EncodeLoop() if (speaker is not None or encoder is not None) else None
        # a stored voice: its reference codes and the x-vector (with a transcript: in-context clone; without: x-vector only)
        self.voice_arrays = voice_arrays(cfg)
        # the graph the card declares: its loops and edges (talker -> codec, or the talker alone: no audio)
        self.graph = self.declared_graph(TALKER, self.talker_loop, self.enc_loop)
        c = self.codec_exec
        spk = SpeakerExecutor(model)
        codes = CodesExecutor(encoder, codec.hop) if encoder is not None else None
        self.executors: dict[Hashable, AnyExecutor] = {Qwen3Work.SPEAKER: Halves(spk.pack, spk.launch, spk.read)}
        if codes is not None:  # without the codec's encoder an in-context clone is refused at submit
            self.executors[WorkUnitKind.ENCODE] = Halves(codes.pack, codes.launch, codes.read)
        self.executors |= self.frames.executors()
        self.buckets: dict[Hashable, list[int]] = {WorkUnitKind.AR_FRAME: tk.batch_buckets}
        self.pools = {"kv": tk.max_running, **({"codec": cd.max_streams} if cd is not None else {}),
                      "encode": enc.max_streams}
        if c is not None and cd is not None:  # audio work only where the card declares the codec loop
            self.executors[WorkUnitKind.AUDIO_CHUNK] = c.executor()
            self.buckets[WorkUnitKind.AUDIO_CHUNK] = cd.batch_buckets
        self.paged_limits(tk, self.frames.kv.num_blocks)
        self.kv_ops = self.calls
        self.opened = OpenText(card, cfg, tokenizer, self.defaults, self.codec_spec if self.enc_loop else None,
                               self.talker_loop)

    # ----- submit --------------------------------------------------------------------------------
    def parse(self, request: object) -> Qwen3Request:
        return parse(request, languages=self.cfg.languages)

    def prepare(self, request: Request, *, voice: StoredVoice | None = None) -> Prepared:
        assert isinstance(request, Qwen3Request)  # what `parse` made
        return prepare(request, self.card, self.cfg, self.tokenizer, self.defaults,
                       self.codec_spec if self.enc_loop is not None else None, voice=voice)

    def check_group(self, group: Sequence[tuple[Request, Prepared]]) -> None:
        first = shared_prompt(group, self.check_group_size, lambda p, first: p.trailing == first.trailing)
        if first.recording is not None:
            raise RequestError("reference_audio: a group shares one prompt; a recording to encode cannot be shared", field='reference_audio')
        check_one_segment(first)

    def open_text(self, request: object, *, voice: StoredVoice | None = None,
                  split: str = "sentence") -> tuple[Qwen3Request, OpenWork]:
        """An open request checked (its text arrives through `feed`, as trailing text rows: open_text.py)."""
        return self.opened.open_text(request, split=split)

    def feed(self, request: Request, work: Prepared, text: str, *, end: bool = False) -> bool:
        assert isinstance(work, OpenWork)  # what `open_text` prepared
        return self.opened.feed(work, text, end=end)

    def read_input(self, source: object) -> EncodeInput:
        return read_recording(source, self.codec_spec if self.encoder is not None else None,
                              self.card.loops.encode.max_reference_seconds, codes=True, speaker=False)

    def read_voice(self, source: object) -> EncodeInput:
        """A recording to store as a voice: through both encoders (codes and x-vector)."""
        return read_recording(source, self.codec_spec if self.encoder is not None else None,
                              self.card.loops.encode.max_reference_seconds, codes=True, speaker=True)

    def voice_outputs(self, state: FrontState) -> dict[str, NDArray[np.float32]]:
        assert isinstance(state, EncodeState)  # the encode loop's
        return {"x_vector": state.xvector}

    def voice_from_embedding(self, embedding: object) -> dict[str, NDArray[np.float32]]:
        """A voice from a precomputed x-vector (vllm-omni's `speaker_embedding`: what the speaker encoder makes
        of a recording, a talker row): it speaks as an x-vector-only clone. A checkpoint without a speaker
        encoder (CustomVoice, VoiceDesign) makes none."""
        width = self.voice_arrays.get("x_vector")
        if width is None:
            raise FieldError(f"speaker_embedding: this checkpoint ({self.cfg.model_type}) has no speaker encoder, so "
                             "no voice is an x-vector; name one of its speakers", field="speaker_embedding")
        return {"x_vector": check_embedding(embedding, width[0])}

    def front_state(self, request_id: int, inputs: tuple[object, ...]) -> EncodeState:
        assert self.enc_loop is not None
        (one,) = inputs
        assert isinstance(one, EncodeInput)  # what `prepare` or `read_input` gave
        return self.enc_loop.init(request_id, speaker_audio=one.speaker_audio, codec_audio=one.codec_audio)

    def spoken(self, record: RequestRecord) -> Spoken:
        """What a request speaks (`SpokenInput`, for a loop added to the graph): an open request's text as fed
        so far, else its `text` and `text_ids`."""
        work, request = record.work, record.request
        if isinstance(work, OpenWork):
            return Spoken(work.text)
        text, ids = getattr(request, "text", None), getattr(request, "text_ids", None)
        return Spoken(text if isinstance(text, str) else None, tuple(ids) if ids is not None else None)

    def encoded(self, record: RequestRecord) -> torch.Tensor | None:
        front = record.front
        assert isinstance(front, EncodeState)  # the encode loop has ended
        if isinstance(record.work, OpenWork):
            return self.opened.encoded(record, front.xvector, front.codes)
        return with_encoded(record.work, self.code_width, front.xvector, front.codes)

    # ----- admission and after -------------------------------------------------------------------
    def start(self, record: RequestRecord, slots: Mapping[str, int],
              share_from: int | None) -> dict[Hashable, LoopState]:
        work, request = record.work, record.request
        talker = self.talker_loop.init(record.id, record.rows, trailing=work.trailing, pad_text=self.cfg.text.tts_pad,
                                       max_frames=work.max_frames, floor=work.floor, slot=slots["kv"],
                                       segment_caps=tuple(s.max_frames for s in work.segments[1:]))
        if share_from is not None:
            self.talker_loop.share(talker, share_from)
        if isinstance(work, OpenWork):
            self.opened.started(record, talker)
        else:
            record.handle.segments = (0, max(1, len(work.segments)))
        return self.with_codec(record, slots, {TALKER: talker}, context=work.context)

    def admitted(self, record: RequestRecord) -> None:
        state, request = record.states[TALKER], record.request
        assert isinstance(state, TalkerState) and isinstance(request, Qwen3Request)
        xvec = None if record.work.xvector is None else torch.from_numpy(record.work.xvector)
        self.calls.admit(state.slot, record.work.sampling, request.seed, xvec)
        self.admit_codec(record)

    def recompute_rows(self, state: LoopState) -> torch.Tensor:
        assert isinstance(state, TalkerState)  # the paged loop's: the AR loop's own state
        return recompute_rows(state)

    def more_input(self, record: RequestRecord, loop: Hashable) -> torch.Tensor | None:
        """The next segment's prompt (the talker loop waits for it once a segment another follows has ended), or
        for an open request the trailing rows of the text fed since (open_text.py)."""
        if isinstance(record.work, OpenWork):
            return self.opened.more_input(record, loop)
        talker = record.states[TALKER]
        assert isinstance(talker, TalkerState)
        return segments.next_segment(record, talker, self.talker_loop, self.calls, self.cfg, rows_of)

    def result(self, record: RequestRecord, outputs: Mapping[Hashable, Any], reason: FinishReason,
               now: float) -> SpeechResult:
        talker = outputs.get(TALKER)
        if isinstance(record.work, OpenWork) and talker is not None:
            self.opened.finished(record, len(talker.codes), talker.finish.value)
        return results.build_result(record, outputs.get(TALKER), outputs.get(CODEC), reason, now,
                                    sample_rate=self.sample_rate, groups=self.code_width, family=self.name,
                                    decoded=self.codec_loop is not None)


class _Factory(FactoryBase[Qwen3Card]):
    """`FAMILY`: `bind(card, model, codec, tokenizer=None, *, graphs=True, encoder=None, generation=None)` is
    `Qwen3Family`'s; building the experts a card names (`experts`), and what config.json alone decides
    (`voice_spec`, `precheck`)."""

    name = "qwen3_tts"
    bound = Qwen3Family

    def experts(self, card: Qwen3Card, *, checkpoint: str | None = None, codec_checkpoint: str | None = None,
                device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> dict[str, object]:
        model = build_model(card, checkpoint=checkpoint, dtype=dtype, device=device)
        codec = build_codec(card, checkpoint=checkpoint, codec_checkpoint=codec_checkpoint, dtype=dtype, device=device)
        encoder = (build_encoder(card, checkpoint=checkpoint, codec_checkpoint=codec_checkpoint, dtype=dtype,
                                 device=device) if card.experts.codec.encoder else None)
        return {"model": model, "codec": codec, "tokenizer": build_tokenizer(card, checkpoint, ids=model.cfg.text),
                "encoder": encoder, "generation": generation_config(card, checkpoint)}

    def voice_spec(self, card: Qwen3Card, checkpoint: str | None = None) -> VoiceSpec:
        """From config.json alone: the code groups, the code predictor's codebook, the x-vector's width."""
        cfg = checkpoint_config(card, checkpoint)
        return VoiceSpec(cfg.num_code_groups, cfg.code_predictor.codebook_size, voice_arrays(cfg))

    def precheck(self, card: Qwen3Card, fields: Mapping[str, object], checkpoint: str | None = None) -> None:
        """From config.json alone: a `language` it does not speak, a `speaker` not in its table (where no
        voice clone is asked for: a clone with a speaker is `parse`'s refusal)."""
        cfg = checkpoint_config(card, checkpoint)
        language, speaker = fields.get("language"), fields.get("speaker")
        if isinstance(language, str):
            languages.resolve(language, cfg.languages)
        clone = fields.get("voice") is not None or fields.get("reference_audio") is not None
        if isinstance(speaker, str) and speaker.strip() and not clone:
            check_speaker(speaker, cfg)


FAMILY: Factory[Qwen3Card] = _Factory()  # the checker holds `bind`'s family to the runtime's protocols (`Family`)

if TYPE_CHECKING:  # the checker holds the optional parts to their protocols
    def _takes_text(family: Qwen3Family) -> TextInput:
        return family

    def _voices_carry_arrays(family: Qwen3Family) -> VoiceArrays:
        return family
__all__ = ["FAMILY", "Qwen3Family"]
