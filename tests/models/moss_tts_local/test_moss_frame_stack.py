"""MOSS-TTS-Local's CPU frame pass (`decode_frame` through `LocalTransformer.frame_stack`, frame_cpu.py, on a CPU in
float32) equals the generic path (`LocalTransformer.step` over a `LocalKV`, `exact.linear` heads) bit for bit: stop
decisions, codes, logprobs, raw stop and code logits and the next backbone row, at batches 1, 3, 16 and 17 (one tile,
several), with the host sampler and with the full sort, for the tiny fixture and other dims (two blocks; a width that
is not a multiple of the tile alignment; each activation)."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
import pytest
import torch

import v2.models.moss_tts_local.model as moss_model
from v2.models.frame_stack_ln import LnFrameStack
from v2.models.moss_tts_local.local_transformer import frame_stack_fits
from v2.models.moss_tts_local.model import FrameOutput, MossTTSLocal
from v2.models.sampling import SamplingTensors
from v2.sampling_settings import HeadSampling, SamplingSettings, needs_full_sort

CHECKPOINT = Path(__file__).resolve().parents[2] / "fixtures" / "moss_tts_local_tiny" / "checkpoint"
BATCHES = (1, 3, 16, 17)
FIELDS = ("stop", "codes", "logprobs", "next_embed", "stop_logits", "code_logits")
pytestmark = pytest.mark.exact

CARD = SamplingSettings(HeadSampling(1.0, 50, 1.0), HeadSampling(1.7, 25, 0.8), 1.0)
FAST = [CARD, SamplingSettings.uniform(0.0), SamplingSettings.uniform(0.8, top_k=5, top_p=1.0, repetition_penalty=1.2)]
FULL = FAST + [SamplingSettings.uniform(1.1, top_k=0, top_p=0.9)]  # a row without top-k: the full sort


@functools.cache
def models() -> list[MossTTSLocal]:
    config = copy.deepcopy(json.loads((CHECKPOINT / "config.json").read_text()))
    config.update(hidden_size=40, local_hidden_size=40, local_transformer_layers=2)
    for key in ("language_config", "qwen3_config"):
        config[key].update(hidden_size=40)
    config["gpt2_config"].update(n_embd=40, n_head=4, n_inner=72, activation_function="gelu_new")
    other = [MossTTSLocal.from_seed(config, 3)]
    for act in ("gelu", "relu"):
        config["gpt2_config"].update(activation_function=act, n_embd=40, n_head=2, n_inner=48)
        other.append(MossTTSLocal.from_seed(config, 4))
    return [MossTTSLocal.from_pretrained(CHECKPOINT)] + other


def frame(model: MossTTSLocal, b: int, kinds: list[SamplingSettings]) -> FrameOutput:
    g = torch.Generator().manual_seed(0)  # row i's inputs are the same at every batch
    hidden = torch.randn(max(BATCHES), model.cfg.hidden_size, generator=g)[:b] * 2
    presence = torch.rand(max(BATCHES), model.cfg.n_vq, model.cfg.codebook_size, generator=g)[:b] < 0.05
    settings = [kinds[i % len(kinds)] for i in range(b)]
    s = SamplingTensors.build(settings, list(range(5, 5 + b)), "cpu")
    with torch.no_grad():
        return model.decode_frame(hidden, s, torch.arange(b) * 3, presence=presence, allow_stop=torch.arange(b) % 2 == 0,
                                  full_sort=any(map(needs_full_sort, settings)), return_logits=True)


def both(monkeypatch: pytest.MonkeyPatch, model: MossTTSLocal, b: int,
         kinds: list[SamplingSettings]) -> tuple[FrameOutput, FrameOutput]:
    """(the frame pass's output, the generic path's output) of the same frame."""
    steps: list[int] = []
    step = LnFrameStack.step
    with monkeypatch.context() as m:
        def counted(self: LnFrameStack, x: torch.Tensor, position: int) -> torch.Tensor:
            steps.append(position)
            return step(self, x, position)

        m.setattr(LnFrameStack, "step", counted)
        got = frame(model, b, kinds)
    assert steps == list(range(model.cfg.n_vq))  # the frame pass ran, position after position
    with monkeypatch.context() as m:
        m.setattr(moss_model, "frame_stack_fits", lambda x: False)
        want = frame(model, b, kinds)
    return got, want


@pytest.mark.parametrize("kinds", [FAST, FULL], ids=["host sampler", "full sort"])
def test_the_local_frame_pass_equals_the_generic_path(monkeypatch, kinds):
    for model in models():
        for b in BATCHES:
            got, want = both(monkeypatch, model, b, kinds)
            for field in FIELDS:
                assert torch.equal(getattr(got, field), getattr(want, field)), (model.cfg.local, b, field)


def test_a_row_of_the_frame_pass_is_the_same_alone_and_in_a_batch():
    model = models()[0]
    batch, alone = frame(model, 17, FAST), frame(model, 1, FAST)
    for field in FIELDS:
        assert torch.equal(getattr(batch, field)[:1], getattr(alone, field)), field


def test_the_frame_pass_serves_float32_on_the_cpu_without_autograd():
    x = torch.zeros(2, 3)
    with torch.no_grad():
        assert frame_stack_fits(x)
        assert not frame_stack_fits(x.to(torch.bfloat16))
    assert not frame_stack_fits(x)  # autograd on: the generic path


def test_a_kept_frame_pass_follows_its_parameters(monkeypatch):
    model = copy.deepcopy(models()[1])  # width 40: the projections read padded copies of their weights
    frame(model, 3, FAST)  # a pass is kept for 3 rows in this thread
    with torch.no_grad():
        model.local_transformer.h[0].attn.c_attn.weight.mul_(1.5)  # in place: the same tensor, a new version
        model.local_transformer.h[1].mlp.fc_out.weight.mul_(0.5)
    got, want = both(monkeypatch, model, 3, FAST)
    for field in FIELDS:
        assert torch.equal(getattr(got, field), getattr(want, field)), field


def test_the_kept_passes_share_one_copy_of_the_negated_weights():
    model = copy.deepcopy(models()[0])  # SiLU: the passes read the MLP's weights negated
    lt = model.local_transformer
    with torch.no_grad():
        one, three = lt.frame_stack(1), lt.frame_stack(3)
        assert one is not three
        for a, b, block in zip(one.blocks, three.blocks, lt.h):
            assert a.fc_in.data_ptr() == b.fc_in.data_ptr() and a.fc_out.data_ptr() == b.fc_out.data_ptr()
            assert torch.equal(a.fc_in, -block.mlp.fc_in.weight)
        lt.h[0].mlp.fc_in.weight.mul_(0.5)  # a new version: the passes and their copies made again
        again = lt.frame_stack(1)
        assert again is not one and torch.equal(again.blocks[0].fc_in, -lt.h[0].mlp.fc_in.weight)


def test_a_kept_frame_pass_follows_a_replaced_parameter(monkeypatch):
    model = copy.deepcopy(models()[1])
    frame(model, 3, FAST)  # a pass is kept for 3 rows in this thread
    fc = model.local_transformer.h[0].mlp.fc_in
    fc.weight = torch.nn.Parameter(fc.weight.detach() * 0.75, requires_grad=False)  # another tensor, version 0
    got, want = both(monkeypatch, model, 3, FAST)
    for field in FIELDS:
        assert torch.equal(getattr(got, field), getattr(want, field)), field


def test_the_kept_head_operands_follow_their_parameters(monkeypatch):
    model = copy.deepcopy(models()[1])  # width 40: the heads read padded copies of their weights
    frame(model, 3, FAST)  # the heads' operands are kept
    with torch.no_grad():
        model.audio_embeddings[4].weight.mul_(1.5)  # in place: the same tensor, a new version
        model.local_text_lm_head.weight.mul_(-1.0)
    got, want = both(monkeypatch, model, 3, FAST)
    for field in FIELDS:
        assert torch.equal(getattr(got, field), getattr(want, field)), field
    table, embed = model.audio_embeddings[7], model.transformer.embed_tokens
    table.weight = torch.nn.Parameter(table.weight.detach().flip(0), requires_grad=False)  # other tensors
    embed.weight = torch.nn.Parameter(embed.weight.detach() * 0.5, requires_grad=False)
    got, want = both(monkeypatch, model, 3, FAST)
    for field in FIELDS:
        assert torch.equal(getattr(got, field), getattr(want, field)), field


def test_a_replaced_codebook_table_is_noticed(monkeypatch):
    model = copy.deepcopy(models()[1])
    frame(model, 3, FAST)  # the heads' operands are kept, the tables among them
    old = model.audio_embeddings[5]
    new = torch.nn.Embedding(*old.weight.shape).requires_grad_(False)
    with torch.no_grad():
        new.weight.copy_(old.weight.flip(0))
    model.audio_embeddings[5] = new  # another module in the list: its parameter is a tensor never looked at
    got, want = both(monkeypatch, model, 3, FAST)
    for field in FIELDS:
        assert torch.equal(getattr(got, field), getattr(want, field)), field


def test_a_replaced_head_module_is_noticed(monkeypatch):
    model = copy.deepcopy(models()[1])
    frame(model, 3, FAST)
    head = model.local_text_lm_head
    model.local_text_lm_head = copy.deepcopy(head)  # the module itself replaced in the model
    with torch.no_grad():
        model.local_text_lm_head.weight.mul_(-1.0)
    tables = model.audio_embeddings
    model.audio_embeddings = copy.deepcopy(tables)  # the whole list of tables replaced
    with torch.no_grad():
        model.audio_embeddings[2].weight.mul_(0.5)
    got, want = both(monkeypatch, model, 3, FAST)
    for field in FIELDS:
        assert torch.equal(getattr(got, field), getattr(want, field)), field



def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """a and b of one dtype with the same bit patterns (torch.equal holds -0.0 == 0.0)."""
    as_int = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[a.dtype]
    return a.dtype == b.dtype and torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))


@pytest.mark.parametrize("head_dim,base", [(10, 10000.0), (20, 10000.0), (64, 10000.0), (128, 1e6)])
def test_the_frames_rope_rows_are_the_interleaved_rows(head_dim, base):
    """The local transformer's frame tables (from the shared rotate-half table, columns in the interleaved order) are
    `interleaved_cos_sin` of the frame's positions in each dtype, and the frame pass's signed sin that with its even
    columns negated, bit for bit."""
    from v2.models.moss_tts_local.local_transformer import FRAME_POSITIONS, _frame_rope, _frame_rope_signed
    from v2.models.rope import interleaved_cos_sin

    cpu = torch.device("cpu")
    want_cos, want_sin = interleaved_cos_sin(torch.arange(FRAME_POSITIONS), head_dim, base)  # [13, D] each
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        cos, sin = _frame_rope(head_dim, base, cpu, dtype)
        assert same_bits(cos, want_cos.to(dtype)) and same_bits(sin, want_sin.to(dtype)), dtype
    cos, signed = _frame_rope_signed(head_dim, base, cpu)
    want_sin[:, 0::2] = -want_sin[:, 0::2]
    assert same_bits(cos, want_cos) and same_bits(signed, want_sin)
