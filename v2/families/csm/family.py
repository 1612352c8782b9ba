"""Sesame CSM bound for the runtime: the `v2.runtime.family.Family` of this family (`FAMILY` binds it).

Owns: building the experts a card names (`experts`: the model, Mimi from the same checkpoint unless given,
the tokenizer from its files, the sampling defaults and frame budget from its generation_config.json), what
the checkpoint's config alone decides (`voice_spec`: a stored voice is N codes a frame; `precheck`: text
on a checkpoint without a tokenizer refused before any weights load), and `CsmFamily`: the loop graph
(`backbone` -> `codec`, `encode` in front; `backbone` holds the paged KV), the executors per work kind
(ENCODE in front, PREFILL, AR_FRAME, AUDIO_CHUNK), the slot pools (`kv`, `codec`, `encode`), the KV pool's
geometry, and the family's side of a request's life: parsing it, preparing it (its turns laid out; a
stored voice: its codes and transcript as a context turn), the prompt laid out again once its context
audio is encoded, its loops' states at admission, device state at admission (sampling, seed, fresh codec
state), the rows a preempted request recomputes, and the result; open requests (the spoken turn's text in
pieces, spoken once complete: open_text.py) with their one segment's marks.
Must not know: the engine's queues, scheduling policy, threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Hashable, Mapping, Sequence


from v2.contracts import FinishReason, LoopState, WorkUnitKind
from v2.errors import RequestError
from v2.families.csm import builders, results
from v2.kit.checks import shared_prompt
from v2.families.csm.audio import read_context
from v2.families.csm.backbone import BACKBONE, CsmLoop, CsmState, recompute_rows
from v2.families.csm.card import CsmCard, codec_config, config_dict, generation_config, model_source
from v2.families.csm.codec import CODEC, CodecLoop
from v2.families.csm.codec_executor import CodecExecutor
from v2.families.csm.encode import EncodeLoop, EncodeState
from v2.families.csm.encode_executor import EncodeExecutor
from v2.families.csm.frame_executor import FrameExecutor, OnStream
from v2.families.csm.open_text import OpenText, OpenWork, spoken_text
from v2.runtime.added import Spoken
from v2.families.csm.params import SPEECH_PARAMS
from v2.families.csm.prepare import CodecSpec, EncodeInput, Prepared, prepare, with_encoded
from v2.families.csm.request import CsmRequest, parse
from v2.families.csm.sampling_names import SAMPLING_KEYS
from v2.families.csm.weights import NAMES
from v2.models.csm.config import CsmConfig, CsmSampling, GenerationDefaults
from v2.models.kv_cache import PagedKVCache
from v2.runtime.family import AnyExecutor, Factory, FactoryBase, Halves, LaunchState, VoiceSpec
from v2.runtime import family as seam
from v2.runtime.handles import SegmentMark, SpeechResult
from v2.kit.paged_family import PagedFamily, pool_blocks
from v2.sampling_settings import HeadSampling

if TYPE_CHECKING:
    import torch

    from v2.families.csm.builders import ByteTokenizer
    from v2.models.csm.model import Csm
    from v2.models.csm.tokenizer import CsmTokenizer
    from v2.models.mimi.model import MimiModel
    from v2.runtime.records import RequestRecord
    from v2.runtime.family import StoredVoice


def defaults(card: CsmCard, generation: dict[str, Any] | None) -> tuple[CsmSampling, int]:
    """(sampling of both stages, frame budget): the card's sampling section, else generation_config.json
    (over transformers' class defaults for a key it lacks); the budget is its `max_new_tokens`, else the
    card's cap."""
    bb = card.loops.backbone
    budget = None if generation and "max_new_tokens" in generation else bb.max_frames
    gen = GenerationDefaults.from_dict(generation, max_new_tokens=budget)
    s = bb.sampling
    if s is None:
        return gen.sampling, gen.max_new_tokens
    return CsmSampling(HeadSampling(s.backbone.temperature, s.backbone.top_k, s.backbone.top_p),
                       HeadSampling(s.depth_decoder.temperature, s.depth_decoder.top_k,
                                    s.depth_decoder.top_p)), gen.max_new_tokens


class CsmFamily(PagedFamily):
    name = "csm"
    weight_names = NAMES
    request_fields = frozenset(CsmRequest.model_fields) | {"sampling"}  # `sampling` nested: sampling_names.py
    sampling_keys = SAMPLING_KEYS  # a rollout's sampling options: its nested `sampling`
    speech_params = SPEECH_PARAMS  # how a server's `SpeechParams` become this family's request (params.py)

    def __init__(self, card: CsmCard, model: Csm, codec: MimiModel,
                 tokenizer: CsmTokenizer | ByteTokenizer | None = None, *, encoder: MimiModel | None = None,
                 generation: dict[str, Any] | None = None, graphs: bool = True) -> None:
        bb, cd, enc = card.loops.backbone, card.loops.codec, card.loops.encode
        cfg: CsmConfig = model.cfg
        if codec.cfg.num_quantizers != cfg.num_codebooks:
            raise ValueError(f"codec: {codec.cfg.num_quantizers} quantizers, the model makes {cfg.num_codebooks} "
                             "codebooks")
        self.card, self.model, self.codec, self.tokenizer, self.encoder = card, model, codec, tokenizer, encoder
        self.name = card.family  # what its trajectories name (the registry finds the recompute by it)
        self.cfg, self.device, self.weights = cfg, model.device, model
        self.speakers: tuple[str, ...] = tuple(str(s) for s in bb.speakers)  # `voice: "0"` -> speaker 0
        self.code_width, self.codebook_size = cfg.num_codebooks, codec.cfg.codebook_size
        self.sample_rate, self.channels = codec.sample_rate, 1
        self.frame_rate = codec.sample_rate / codec.hop
        self.sampling, self.default_frames = defaults(card, generation)
        self._launch: LaunchState = lambda work: work()
        self.backbone_loop = CsmLoop(bb, cfg.ids.codebook_eos)
        self.codec_loop = CodecLoop(cd) if cd is not None else None  # no codec loop: codes only, no audio
        blocks = pool_blocks(bb, model.device, PagedKVCache.block_bytes(cfg.backbone, bb.block_size, model.dtype))
        self.frames = FrameExecutor(model, num_slots=bb.max_running, max_len=bb.max_prompt_rows + bb.max_frames,
                                    batch_buckets=bb.batch_buckets, num_blocks=blocks, block_size=bb.block_size,
                                    graphs=graphs)
        self.calls = OnStream(self.frames, lambda work: self._launch(work))
        self.codec_spec = CodecSpec(codec.sample_rate, codec.hop, codec.cfg.codebook_size, encoder is not None)
        self.enc_loop = EncodeLoop() if encoder is not None else None
        # the graph the card declares: its loops and edges (backbone -> codec, or the backbone alone: no audio)
        self.graph = self.declared_graph(BACKBONE, self.backbone_loop, self.enc_loop)
        self.executors: dict[Hashable, AnyExecutor] = {}
        if encoder is not None:  # without the encoder context audio is refused at submit (codes still work)
            e = EncodeExecutor(encoder)
            self.executors[WorkUnitKind.ENCODE] = Halves(e.pack, e.launch, e.read)
        self.executors |= self.frames.executors()
        self.buckets: dict[Hashable, list[int]] = {WorkUnitKind.AR_FRAME: bb.batch_buckets}
        self.pools = {"kv": bb.max_running, "encode": enc.max_streams}
        self.codec_exec: CodecExecutor | None = None
        if cd is not None:
            c = self.codec_exec = CodecExecutor(codec, num_slots=cd.max_streams, batch_buckets=cd.batch_buckets,
                                                frame_buckets=cd.frame_buckets, graphs=graphs)
            self.executors[WorkUnitKind.AUDIO_CHUNK] = c.executor()
            self.buckets[WorkUnitKind.AUDIO_CHUNK] = cd.batch_buckets
            self.pools["codec"] = cd.max_streams
        self.paged_limits(bb, self.frames.kv.num_blocks)
        self.kv_ops = self.calls
        self.opened = OpenText(card, cfg, tokenizer, self.prepare)

    # ----- submit --------------------------------------------------------------------------------
    def parse(self, request: object) -> CsmRequest:
        return parse(request)

    def prepare(self, request: seam.Request, *, voice: StoredVoice | None = None) -> Prepared:
        assert isinstance(request, CsmRequest)  # what `parse` made
        return prepare(request, self.card, self.cfg, self.tokenizer, self.sampling, self.default_frames,
                       self.codec_spec, voice=voice)

    def open_text(self, request: object, *, voice: StoredVoice | None = None,
                  split: str = "sentence") -> tuple[CsmRequest, OpenWork]:
        """An open request checked; its spoken turn's text comes through `feed` (open_text.py). `split` is
        another family's segment rule: a CSM turn is one prompt, spoken whole."""
        return self.opened.open_text(request, voice=voice)

    def feed(self, request: seam.Request, work: seam.Prepared, text: str, *, end: bool = False) -> bool:
        assert isinstance(work, OpenWork)  # what `open_text` prepared
        return self.opened.feed(work, text, end=end)

    def check_group(self, group: Sequence[tuple[seam.Request, seam.Prepared]]) -> None:
        if shared_prompt(group, self.check_group_size).recordings:
            raise RequestError("context: a group shares one prompt; recordings to encode cannot be shared (give the "
                               "turns' codes)", field="context")

    def read_input(self, source: object) -> EncodeInput:
        """One recording for an encode-only job (`rt.encode_audio`, a voice being stored)."""
        if self.encoder is None:
            raise RequestError("reference_audio: this runtime has no codec encoder", field="reference_audio")
        return EncodeInput((read_context(source, sample_rate=self.sample_rate, hop=self.codec.hop,
                                         max_seconds=self.card.loops.encode.max_context_seconds,
                                         field="reference_audio"),))

    def front_state(self, request_id: int, inputs: tuple[object, ...]) -> EncodeState:
        assert self.enc_loop is not None
        (one,) = inputs
        assert isinstance(one, EncodeInput)  # what `prepare` or `read_input` gave
        return self.enc_loop.init(request_id, one.audio)

    def spoken(self, record: RequestRecord) -> Spoken:
        """What a request speaks (`SpokenInput`, for a loop added to the graph): its last turn's text (an open
        request's as fed so far), and its `text_ids` where it gave them."""
        request = record.request
        ids = getattr(request, "text_ids", None)
        if isinstance(record.work, OpenWork) or isinstance(getattr(request, "text", None), str):
            return Spoken(spoken_text(record.work, request), tuple(ids) if ids is not None else None)  # type: ignore[arg-type]
        return Spoken(None, tuple(ids) if ids is not None else None)

    def encoded(self, record: RequestRecord) -> torch.Tensor | None:
        front = record.front
        assert isinstance(front, EncodeState) and front.codes is not None  # the encode loop has ended
        if isinstance(record.work, OpenWork):
            return self.opened.encoded(record.work, front.codes)
        return with_encoded(record.work, self.cfg, front.codes)

    # ----- admission and after -------------------------------------------------------------------
    def start(self, record: RequestRecord, slots: Mapping[str, int],
              share_from: int | None) -> dict[Hashable, LoopState]:
        state = self.backbone_loop.init(record.id, record.rows, max_frames=record.work.max_frames, slot=slots["kv"])
        if share_from is not None:
            self.backbone_loop.share(state, share_from)
        if isinstance(record.work, OpenWork):  # its one segment begins (a mark on the handle)
            record.handle.mark(SegmentMark(0, 0, len(record.work.text), 0))
        return self.with_codec(record, slots, {BACKBONE: state})

    def admitted(self, record: RequestRecord) -> None:
        state, request = record.states[BACKBONE], record.request
        assert isinstance(state, CsmState) and isinstance(request, CsmRequest)
        self.calls.admit(state.slot, record.work.sampling, request.seed)
        self.admit_codec(record)

    def recompute_rows(self, state: LoopState) -> torch.Tensor:
        assert isinstance(state, CsmState)  # the backbone's, the paged loop
        return recompute_rows(state, self.cfg.ids.audio)

    def more_input(self, record: RequestRecord, loop: Hashable | None) -> torch.Tensor | None:
        """An open request waiting for admission: its prompt once its text has ended (one prompt per request:
        the backbone loop never waits for input)."""
        if loop is None and isinstance(record.work, OpenWork):
            return self.opened.first_prompt(record.work)
        return None

    def result(self, record: RequestRecord, outputs: Mapping[Hashable, Any], reason: FinishReason,
               now: float) -> SpeechResult:
        assert isinstance(record.request, CsmRequest)
        out = results.build_result(record, outputs.get(BACKBONE), outputs.get(CODEC), reason, now,
                                   sample_rate=self.sample_rate, width=self.code_width,
                                   eos=self.cfg.ids.codebook_eos, family=self.name,
                                   text=spoken_text(record.work, record.request))
        if isinstance(record.work, OpenWork) and out.segments:  # its one segment's mark, ended
            seg = out.segments[0]
            record.handle.mark(SegmentMark(0, 0, seg.text_end, 0, seg.frame_end, seg.finish_reason))
        return out


class _Factory(FactoryBase[CsmCard]):
    """`FAMILY`: `bind(card, model, codec, tokenizer=None, *, graphs=True, encoder=None, generation=None)` is
    `CsmFamily`'s; the checkpoint's config read without weights: `voice_spec`, `precheck`."""

    name = "csm"
    bound = CsmFamily

    def experts(self, card: CsmCard, *, checkpoint: str | None = None, codec_checkpoint: str | None = None,
                device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> dict[str, object]:
        model = builders.build_model(card, checkpoint=checkpoint, dtype=dtype, device=device)
        codec = builders.build_codec(card, checkpoint=checkpoint, codec_checkpoint=codec_checkpoint, dtype=dtype,
                                     device=device)
        return {"model": model, "codec": codec, "tokenizer": builders.build_tokenizer(card, checkpoint),
                "encoder": codec if card.experts.codec.encoder else None,
                "generation": generation_config(card, checkpoint)}

    def voice_spec(self, card: CsmCard, checkpoint: str | None = None) -> VoiceSpec:
        """From the config files alone: N codebooks of the codec's codebook size; codes only."""
        cfg = config_dict(card, checkpoint)
        size = int(codec_config(card, checkpoint).get("codebook_size", 2048))
        return VoiceSpec(int(cfg["num_codebooks"]), size, {})

    def precheck(self, card: CsmCard, fields: Mapping[str, object], checkpoint: str | None = None) -> None:
        """Without weights: plain `text` on a checkpoint that ships no tokenizer.json."""
        if not isinstance(fields.get("text"), str) or fields.get("text_ids") is not None:
            return
        source = model_source(card, checkpoint)
        if builders.build_tokenizer(card, checkpoint) is None:
            raise RequestError(f"text: the checkpoint {source} has no tokenizer (no tokenizer.json); give text_ids",
                               field="text")


FAMILY: Factory[CsmCard] = _Factory()  # the checker holds `bind`'s family to the runtime's protocols (`Family`)
__all__ = ["FAMILY", "CsmFamily"]
