"""Qwen3-Omni talker: the MoE decoder that speaks codebook 0, its dense code predictor, and the step functions.

Owns: the module tree under the release's names (`talker.model.{layers, norm, codec_embedding}`, `codec_head`,
`text_projection`, `hidden_projection`, `code_predictor.*`), a request's talker sampling (`talker_sampling`)
and the talker's maths where it differs from Qwen3-TTS's. What is the same is reused, not copied: `OmniTalker` IS a `v2.models.qwen3_tts.model.Qwen3TTS`
seen through `tts_view` (a Qwen3-TTS config of the talker's sizes and ids), so `prefill`, `frame_step`
(complete frame t-1 with the code predictor, feed frame(codes) + one text row, one decode row, group-0
logits), `predict_codes` (Qwen3-TTS's `CodePredictor`: rows [h, E_0[c_0]], group g from `lm_head.(g-1)`, the
code's row from `codec_embedding.(g-1)`; the same tensors and names here), `choose` (penalty over the
distinct earlier group-0 ids, ids 2048..3071 but EOS suppressed, then the row's sampling), `draws`, the KV
caches and the reference loop `qwen3_tts.generate.generate_batch` all run unchanged.
Differs from Qwen3-TTS: every decoder layer's MLP is moe.py's `SparseMoe` (top-k routed experts plus the
sigmoid-gated shared expert); no text table of its own (its text rows are the THINKER's embeddings,
projected by `text_projection`, and user-turn audio rows are the thinker's hidden states projected by
`hidden_projection`; both fc1 -> intermediate_size, SiLU, fc2); `tts_bos/eos/pad` rows are set from the
thinker's table (`set_special_text`); no minimum frame count (EOS allowed from the first choice); positions
are M-RoPE with equal t/h/w components, i.e. plain RoPE (talker_handoff.py checks that).
Must not know: the thinker's layers, requests, scheduling, code2wav.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from v2.models import exact
from v2.models.qwen3_omni.config import CodePredictorConfig, Qwen3OmniConfig, TalkerConfig, TalkerDefaults
from v2.models.qwen3_omni.moe import SparseMoe
from v2.models.qwen3_tts import config as tts
from v2.models.qwen3_tts.model import Qwen3TTS, TextProjection
from v2.sampling_settings import HeadSampling


class Projection(TextProjection):
    """fc2(silu(fc1(x))) with biases: thinker width -> `mid` -> talker width (Qwen3-TTS's `TextProjection`
    with its own middle width)."""

    def __init__(self, width_in: int, mid: int, width_out: int) -> None:
        nn.Module.__init__(self)
        self.linear_fc1 = exact.Linear(width_in, mid, bias=True)
        self.linear_fc2 = exact.Linear(mid, width_out, bias=True)


def tts_view(cfg: Qwen3OmniConfig) -> tts.Qwen3TTSConfig:
    """The talker and code predictor as a Qwen3-TTS config (the same decoder sizes, codec ids and group count).
    `text_vocab_size` 1: the Qwen3-TTS text table is not part of this model (removed after building)."""
    t, cp = _parts(cfg)
    ids = cfg.ids
    talker = tts.TalkerConfig(decoder=t.text.decoder, text_vocab_size=1, text_hidden_size=t.thinker_hidden_size,
                              num_code_groups=t.num_code_groups)
    predictor = tts.CodePredictorConfig(decoder=cp.decoder, num_code_groups=cp.num_code_groups)
    c = t.codec
    codec = tts.CodecIds(pad=c.pad, bos=c.bos, eos=c.eos, think=c.nothink, nothink=c.nothink, think_bos=c.think_bos,
                         think_eos=c.think_eos)
    text = tts.TextIds(im_start=ids.im_start, im_end=ids.im_end, tts_bos=ids.tts_bos, tts_eos=ids.tts_eos,
                       tts_pad=ids.tts_pad)
    return tts.Qwen3TTSConfig(talker=talker, code_predictor=predictor, speaker_encoder=None, codec=codec, text=text,
                              model_type="qwen3_omni_talker", model_size="", speakers=dict(t.speakers),
                              speaker_names=tuple(n for n, _ in t.speakers))


def talker_sampling(defaults: TalkerDefaults, *, temperature: float | None = None, top_k: int | None = None,
                    top_p: float | None = None, repetition_penalty: float | None = None) -> tts.Qwen3TTSSampling:
    """One request's talker sampling: the given values over the release defaults (`talker_*`). Temperature 0 is
    greedy and, as the reference mirrors the talker's do_sample, makes the code predictor greedy too; otherwise
    the code predictor draws at temperature 1 with the defaults' top-k / top-p (50 / 0.8). Errors name the field."""
    t = defaults.temperature if temperature is None else temperature
    k = defaults.top_k if top_k is None else top_k
    p = defaults.top_p if top_p is None else top_p
    penalty = defaults.repetition_penalty if repetition_penalty is None else repetition_penalty
    for name, value, ok in (("talker_temperature", t, t >= 0), ("talker_top_k", k, isinstance(k, int) and k >= 0),
                            ("talker_top_p", p, 0 < p <= 1), ("talker_repetition_penalty", penalty, penalty > 0)):
        if isinstance(value, bool) or not ok or value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{name}: expected a finite value in range, got {value!r}")
    if t == 0:
        greedy = HeadSampling(0.0, 0, 1.0)
        return tts.Qwen3TTSSampling(greedy, greedy, float(penalty))
    return tts.Qwen3TTSSampling(HeadSampling(float(t), int(k), float(p)),
                                HeadSampling(1.0, defaults.predictor_top_k, defaults.predictor_top_p), float(penalty))


def _parts(cfg: Qwen3OmniConfig) -> tuple[TalkerConfig, CodePredictorConfig]:
    if cfg.talker is None or cfg.code_predictor is None:
        raise ValueError("config.json: 'enable_audio_output' is false: this checkpoint has no talker")
    return cfg.talker, cfg.code_predictor


class OmniTalker(Qwen3TTS):
    """`talker.*` of a Qwen3-Omni checkpoint with Qwen3-TTS's step functions (see the module docstring)."""

    def __init__(self, cfg: Qwen3OmniConfig) -> None:
        super().__init__(tts_view(cfg))
        t, _ = _parts(cfg)
        self.omni = t
        model = self.talker.model
        del model.text_embedding  # the thinker's table serves (no `talker.model.text_embedding` in the release)
        width, mid, hidden = t.thinker_hidden_size, t.text.decoder.intermediate_size, t.hidden_size
        self.talker.text_projection = Projection(width, mid, hidden)
        self.talker.add_module("hidden_projection", Projection(width, mid, hidden))
        for layer in model.layers:
            layer.add_module("mlp", SparseMoe(t.text.moe))
        self._special: Tensor | None = None

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu") -> "OmniTalker":
        """The `talker.*` tensors of a Qwen3-Omni checkpoint directory (strict). `set_special_text` still
        needs the thinker's rows of tts_bos / tts_eos / tts_pad."""
        from v2.models.qwen3_omni.loader import load_part, open_checkpoint
        from v2.models.weights import empty_model

        ckpt = open_checkpoint(Path(path))
        model = empty_model(cls, ckpt.config)
        load_part(model.talker, ckpt, "talker.", dtype=dtype, device=device)
        return model.eval()

    # ----- the thinker's rows ------------------------------------------------------------------
    @property
    def hidden_projection(self) -> Projection:
        return cast(Projection, self.talker.get_submodule("hidden_projection"))

    def project_text(self, rows: Tensor) -> Tensor:
        """Pt(x): thinker embedding rows [..., H_thinker] -> talker rows [..., H]."""
        return self.talker.text_projection(rows.to(self.device, self.dtype))

    def project_hidden(self, rows: Tensor) -> Tensor:
        """Ph(x): thinker hidden states (layer `accept_hidden_layer`) [..., H_thinker] -> talker rows [..., H]."""
        return self.hidden_projection(rows.to(self.device, self.dtype))

    def set_special_text(self, thinker_rows: Tensor) -> None:
        """thinker_rows [3, H_thinker]: the thinker's `embed_tokens` rows of tts_bos, tts_eos, tts_pad (in that
        order); their projections become `special_text_rows`."""
        if thinker_rows.shape != (3, self.omni.thinker_hidden_size):
            raise ValueError(f"thinker_rows: expected [3, {self.omni.thinker_hidden_size}] (tts_bos, tts_eos, "
                             f"tts_pad), got {list(thinker_rows.shape)}")
        with torch.no_grad():
            self._special = self.project_text(thinker_rows)

    def special_text_rows(self) -> Tensor:
        """[3, H]: Pt(tts_bos), Pt(tts_eos), Pt(tts_pad) (set by `set_special_text`)."""
        if self._special is None:
            raise ValueError("the talker's tts_bos/tts_eos/tts_pad rows are not set: call set_special_text with "
                             "the thinker's embedding rows")
        return self._special

    def embed_text(self, ids: Tensor) -> Tensor:
        raise ValueError("the Qwen3-Omni talker has no text table: project the thinker's embedding rows "
                         "(project_text)")

    def speaker_id(self, name: str) -> int:
        """The codec id of speaker `name` (case-insensitive); an error naming `speaker` otherwise."""
        return self.omni.speaker_id(name)
