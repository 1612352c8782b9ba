"""The decode attention kernel: each row reads only keys 0 .. length - 1 of its own slot.

On a machine without CUDA the Triton kernel runs in Triton's interpreter (conftest sets TRITON_INTERPRET),
so the same kernel source that a GPU compiles is checked here against a float64 reference.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models import kernels
from v2.models.kernels import decode_attention as da

pytestmark = pytest.mark.skipif(da.triton is None, reason="needs triton")


def _case(seed: int, b: int, hq: int, hkv: int, d: int, slots: int, max_len: int):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(slots + 1, hkv, max_len, d, generator=g)
    v = torch.randn(slots + 1, hkv, max_len, d, generator=g)
    q = torch.randn(b, hq, d, generator=g) * 2
    return q, k, v


def _reference(q, k, v, slots, lengths, context):
    return da.decode_attention_reference(q.double(), k.double(), v.double(), slots, lengths, context).float()


@settings(max_examples=12, deadline=None)
@given(st.data())
def test_kernel_equals_reference_at_mixed_lengths(data):
    hkv = data.draw(st.integers(1, 3), label="kv heads")
    group = data.draw(st.sampled_from([1, 2, 3, 4]), label="query heads per kv head")
    d = data.draw(st.sampled_from([8, 16, 24]), label="head dim")
    context = data.draw(st.sampled_from([1, 64, 255, 256, 257, 600]), label="context")
    b = data.draw(st.integers(1, 4), label="rows")
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, context), min_size=b, max_size=b), label="lengths"))
    slots = torch.tensor(data.draw(st.lists(st.integers(0, 3), min_size=b, max_size=b), label="slots"))  # may repeat
    q, k, v = _case(data.draw(st.integers(0, 99), label="seed"), b, hkv * group, hkv, d, 3, context + 5)
    out = da._decode_attention_triton(q, k, v, slots, lengths, context)
    torch.testing.assert_close(out, _reference(q, k, v, slots, lengths, context), atol=2e-5, rtol=2e-5)


def test_kernel_reads_no_key_past_a_rows_length_nor_another_slot():
    q, k, v = _case(1, 3, 8, 2, 16, 4, 700)
    slots, lengths = torch.tensor([1, 3, 0]), torch.tensor([700, 300, 1])
    want = _reference(q, k, v, slots, lengths, 700)
    for s, n in zip(slots.tolist(), lengths.tolist()):  # poison everything no row may read
        k[s, :, n:], v[s, :, n:] = float("nan"), float("nan")
    k[[2, 4]], v[[2, 4]] = float("nan"), float("nan")
    out = da._decode_attention_triton(q, k, v, slots, lengths, 700)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want, atol=2e-5, rtol=2e-5)


def test_kernel_refuses_a_query_that_does_not_fit_the_cache():
    q, k, v = _case(2, 1, 3, 2, 16, 1, 64)
    with pytest.raises(ValueError, match="does not fit the cache"):
        da._decode_attention_triton(q, k, v, torch.tensor([0]), torch.tensor([5]), 64)


@torch.no_grad()
def test_backbone_decode_through_the_kernel_equals_the_sdpa_path(tiny_model, monkeypatch):
    """A decode step with rows at mixed positions (and a padded row on the dummy slot) gives the same
    output and the same cache through the kernel as through the masked SDPA path."""
    g = torch.Generator().manual_seed(3)
    lengths, h = [80, 7, 33], tiny_model.cfg.hidden_size
    results = []
    for force in (False, True):
        monkeypatch.setattr(kernels, "FORCE", force)
        cache = tiny_model.allocate_kv(4, 96)
        g.manual_seed(3)
        for slot, n in zip([0, 2, 3], lengths):
            tiny_model.transformer.forward_cached(torch.randn(1, n, h, generator=g), cache, torch.tensor([slot]),
                                                  torch.arange(n)[None])
        x = torch.randn(4, 1, h, generator=g)
        slots = torch.tensor([0, 2, 3, cache.dummy_slot])
        positions = torch.tensor([lengths + [0]]).T  # [4, 1]
        valid = torch.tensor([[True], [True], [True], [False]])
        out = tiny_model.transformer.forward_cached(x, cache, slots, positions, valid, context_len=96)
        results.append((out[:3], cache.k.clone(), cache.v.clone()))
    (a, ka, va), (b, kb, vb) = results
    torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kb, ka, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(vb, va, atol=1e-6, rtol=1e-6)


COMPILE_FOR_HOPPER = """
import sys
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from v2.models import kernels
from v2.models.kernels import decode_attention as da

ptr = "*" + sys.argv[1]
split = {"q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "table_ptr": "*i64", "len_ptr": "*i64", "part_ptr": "*fp32",
         "lse_ptr": "*fp32", "ticket_ptr": "*i32", "out_ptr": ptr, "sk_s": "i64", "sk_h": "i32", "sk_l": "i32",
         "sv_s": "i64", "sv_h": "i32", "sv_l": "i32", "table_width": "i32", "scale": "fp32", "num_heads": "i32",
         "num_splits": "i32"}
split_consts = {"GROUP": 4, "BLOCK_G": 16, "HEAD_DIM": 128, "BLOCK_D": 128, "BLOCK_N": da.BLOCK_N,
                "SPLIT_LEN": da.SPLIT, "PAGE": int(sys.argv[2]), "IEEE": ptr == "*fp32", "BLOCK_S": 32}
src = ASTSource(fn=da._split_kernel, signature={**split, **{k: "constexpr" for k in split_consts}},
                constexprs=split_consts)
built = compile(src, target=GPUTarget("cuda", 90, 32))
ptx = built.asm["ptx"]
print(len(built.asm["cubin"]), int("atom.global.gpu.acq_rel.add" in ptx), int("ld.global.cg" in ptx))
"""


@pytest.mark.parametrize("dtype,page", [("bf16", "16"), ("fp32", "16"), ("bf16", "6144")])
def test_kernels_compile_for_hopper_without_a_gpu(dtype, page, hopper_compile):
    """Triton compiles the kernel to sm_90 machine code here (no GPU needed): what the interpreter cannot
    check (types, layouts, the block-skipping branch, the ticket's acquire-release atomic and the merge's
    reads past L1) is checked by the real compiler at the release's sizes, over 16-row pages and over a
    contiguous 6144-row slot."""
    cubin, ticket, past_l1 = hopper_compile(COMPILE_FOR_HOPPER, dtype, page)
    assert cubin > 0 and ticket == 1 and past_l1 == 1  # the merge's ticket and its reads of the other splits
