"""The CPU paged decode row (`decode_row`, taken by `Qwen3Backbone.forward_cached` for one position per row over a
`PagedKVCache` in float32) equals the generic pass bit for bit: the rows' outputs and every block of the pool
after several decode steps, at batches 1, 3, 16 and 17 (one tile, several), with ragged contexts (one row's keys
in one block, another's across many; positions on block boundaries), a padding row, a context bound below the
table's width, for the Qwen3-TTS talker's dims (q/k norms, head_dim 128), CSM's backbone (a Llama stack: no q/k
norms, scaled RoPE) and one kv head for four query heads; and a row's output is the same alone as in a batch."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from v2.models import decode_row, decode_row_kept
from v2.models.config import BackboneConfig
from v2.models.kv_cache import PagedKVCache
from v2.models.qwen3 import Qwen3Backbone
from v2.models.rope import Llama3Scaling, rotate_half_cos_sin

pytestmark = pytest.mark.exact

TALKER = BackboneConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=128,
                        intermediate_size=128, vocab_size=8, rms_norm_eps=1e-6, rope_theta=1e6)
BACKBONE = BackboneConfig(hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=12,
                          intermediate_size=96, vocab_size=8, rms_norm_eps=1e-5, rope_theta=5e5)
ONE_KV = BackboneConfig(hidden_size=40, num_layers=1, num_heads=4, num_kv_heads=1, head_dim=8,
                        intermediate_size=72, vocab_size=8, rms_norm_eps=1e-6, rope_theta=1e4)
LLAMA = Llama3Scaling(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
DIMS: dict[str, tuple[BackboneConfig, dict[str, Any]]] = {
    "talker": (TALKER, {}),
    "llama": (BACKBONE, {"qk_norm": False, "rope_scaling": LLAMA}),
    "one_kv": (ONE_KV, {}),
}


def model_of(name: str) -> Qwen3Backbone:
    cfg, kw = DIMS[name]
    torch.manual_seed(3)
    m = Qwen3Backbone(cfg, embed_tokens=False, **kw)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.3)
    return m


def pool(cfg: BackboneConfig, rows: int, width: int, size: int) -> tuple[PagedKVCache, torch.Tensor]:
    """A pool of random K/V (every block, the dummy's too) and scattered tables of `width` blocks per row."""
    g = torch.Generator().manual_seed(rows * 31 + size)
    cache = PagedKVCache.allocate(cfg, rows * width, size, dtype=torch.float32, device="cpu")
    cache.k.normal_(generator=g)
    cache.v.normal_(generator=g)
    return cache, torch.randperm(rows * width, generator=g).view(rows, width)


def decode(model: Qwen3Backbone, cache: PagedKVCache, tables: torch.Tensor, start: torch.Tensor,
           valid: torch.Tensor, context: int, steps: int, fast: bool) -> list[torch.Tensor]:
    """`steps` decode rows from positions `start` [B], each step's input the last output; the outputs."""
    g = torch.Generator().manual_seed(int(start.sum()))
    x = torch.randn(start.shape[0], 1, model.cfg.hidden_size, generator=g) * 2
    outs = []
    with torch.no_grad():
        for step in range(steps):
            if fast:
                assert decode_row.fits(x, cache)
            x = model.forward_cached(x, cache, tables, (start + step)[:, None], valid[:, None], context)
            outs.append(x)
    return outs


def both(monkeypatch: pytest.MonkeyPatch, name: str, start: list[int], size: int, width: int, context: int,
         pad_last: bool = False) -> None:
    model = model_of(name)
    b = len(start)
    base, tables = pool(model.cfg, b, width, size)
    valid = torch.ones(b, dtype=torch.bool)
    if pad_last:
        valid[-1] = False
        tables[-1] = base.dummy_block
    runs = []
    for fast in (True, False):
        cache = PagedKVCache(base.k.clone(), base.v.clone())
        with monkeypatch.context() as m:
            calls: list[int] = []
            forward = decode_row.forward

            def counted(*a: Any) -> torch.Tensor:
                calls.append(1)
                return forward(*a)

            m.setattr(decode_row, "forward", counted)
            if not fast:
                m.setattr(decode_row, "fits", lambda x, cache: False)
            outs = decode(model, cache, tables, torch.tensor(start), valid, context, 3, fast)
        assert len(calls) == (3 if fast else 0)
        runs.append((outs, cache))
    (got, got_cache), (want, want_cache) = runs
    real = valid.nonzero()[:, 0]
    for a, w in zip(got, want):
        assert torch.equal(a[real], w[real])
    assert torch.equal(got_cache.k, want_cache.k) and torch.equal(got_cache.v, want_cache.v)


def ragged(b: int, size: int, top: int) -> list[int]:
    """Positions from 0 to about top: block boundaries (a block's first and last offsets) among them."""
    picks = [0, size - 1, size, 2 * size - 1, top - 3, 5, 3 * size + 1]
    return [picks[i] if i < len(picks) else (37 * i) % (top - 3) for i in range(b)]


@pytest.mark.parametrize("name", sorted(DIMS))
@pytest.mark.parametrize("b", [1, 3, 16, 17])
def test_decode_row_equals_the_generic_pass(monkeypatch: pytest.MonkeyPatch, name: str, b: int) -> None:
    both(monkeypatch, name, ragged(b, 16, 120), size=16, width=8, context=128)


@pytest.mark.parametrize("b", [3, 17])
def test_small_blocks_a_padding_row_and_a_narrow_context(monkeypatch: pytest.MonkeyPatch, b: int) -> None:
    """Blocks of 4 (a row's keys over up to 12 blocks, not a power of two), a padding row aimed at the dummy
    block, and a context bound (64) below the tables' 20 blocks."""
    both(monkeypatch, "talker", ragged(b, 4, 58), size=4, width=20, context=64, pad_last=True)


def test_a_row_alone_equals_the_row_in_a_batch() -> None:
    model = model_of("talker")
    start = torch.tensor(ragged(17, 16, 120))
    base, tables = pool(model.cfg, 17, 8, 16)
    valid = torch.ones(17, dtype=torch.bool)
    batch = decode(model, PagedKVCache(base.k.clone(), base.v.clone()), tables, start, valid, 128, 2, True)
    for row in (0, 4, 16):
        cache = PagedKVCache(base.k.clone(), base.v.clone())
        g = torch.Generator().manual_seed(int(start.sum()))
        x = (torch.randn(17, 1, model.cfg.hidden_size, generator=g) * 2)[row: row + 1]
        with torch.no_grad():
            for step in range(2):
                x = model.forward_cached(x, cache, tables[row: row + 1], (start[row: row + 1] + step)[:, None],
                                         valid[:1, None], 128)
                assert torch.equal(x[0], batch[step][row])


def test_other_forms_keep_the_generic_pass() -> None:
    """Autograd on, another dtype, a prefill chunk, or a block size that is not a power of two: not served."""
    cfg = TALKER
    x = torch.zeros(2, 1, cfg.hidden_size)
    cache = PagedKVCache.allocate(cfg, 4, 16, dtype=torch.float32, device="cpu")
    with torch.no_grad():
        assert decode_row.fits(x, cache)
        assert not decode_row.fits(torch.zeros(2, 3, cfg.hidden_size), cache)
        assert not decode_row.fits(x.double(), cache)
        assert not decode_row.fits(x, PagedKVCache.allocate(cfg, 4, 12, dtype=torch.float32, device="cpu"))
    with torch.enable_grad():
        assert not decode_row.fits(x, cache)


def test_calls_of_other_shapes_in_turn_reuse_the_scratch(monkeypatch: pytest.MonkeyPatch) -> None:
    """One backbone serving 16 rows of short contexts, one row of a long one, then 16 again (its buffers regrown
    and its plans remade between): each call equals the generic pass."""
    model = model_of("talker")
    for b, start in ((16, [3] * 16), (1, [117]), (16, [5 + i for i in range(16)]), (3, [60, 2, 90])):
        base, tables = pool(model.cfg, b, 8, 16)
        same_as_generic(monkeypatch, model, base, tables, start, 128)


def same_as_generic(monkeypatch: pytest.MonkeyPatch, model: Qwen3Backbone, cache: PagedKVCache, tables: torch.Tensor,
                    start: list[int], context: int) -> None:
    """One call at positions `start` both ways from the same pool: the outputs and the pools the same bits."""
    b = len(start)
    x = torch.randn(b, 1, model.cfg.hidden_size, generator=torch.Generator().manual_seed(sum(start)))
    pos, valid = torch.tensor(start)[:, None], torch.ones(b, 1, dtype=torch.bool)
    outs = []
    for fast in (True, False):
        pool_ = PagedKVCache(cache.k.clone(), cache.v.clone())
        with monkeypatch.context() as m, torch.no_grad():
            if not fast:
                m.setattr(decode_row, "fits", lambda x, cache: False)
            outs.append((model.forward_cached(x, pool_, tables, pos, valid, context), pool_))
    (got, got_pool), (want, want_pool) = outs
    assert torch.equal(got, want) and torch.equal(got_pool.k, want_pool.k) and torch.equal(got_pool.v, want_pool.v)


@pytest.mark.parametrize("name", sorted(DIMS))
def test_the_rope_table_rows_are_the_calls_rows(name: str) -> None:
    """The kept RoPE table's rows (positions 0 .. P - 1 at once) equal `rotate_half_cos_sin` of the same positions
    in calls of any batch (each element's cos / sin whatever the tensor's shape), sin's first half negated."""
    model = model_of(name)
    cfg, d = model.cfg, model.cfg.head_dim
    g = torch.Generator().manual_seed(d)
    for top in (7, 300, 5000):
        table = decode_row_kept.Scratch().grow_rope(model, top, torch.device("cpu"))
        assert table.shape[0] > top and table.shape[1:] == (2, d)
        for b in (1, 2, 3, 5, 8, 13, 16, 17, 33):
            pos = torch.randint(0, top + 1, (b, 1), generator=g)
            cos, sin = rotate_half_cos_sin(pos, d, cfg.rope_theta, model.rope_scaling)  # [B, 1, D] each
            sin[..., : d // 2].neg_()
            rows = table[pos[:, 0]]  # [B, 2, D]
            assert torch.equal(rows[:, :1].view(torch.int32), cos.view(torch.int32))
            assert torch.equal(rows[:, 1:].view(torch.int32), sin.view(torch.int32))


def test_positions_past_the_table_grow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """One backbone at position 5, then past its first table (256 positions), then both in one batch."""
    model = model_of("talker")
    cache, tables = pool(model.cfg, 2, 24, 16)
    for start in ([5], [300], [7, 370]):
        same_as_generic(monkeypatch, model, cache, tables[: len(start)], start, 384)


def test_parameters_written_or_replaced_between_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept weights (transposes, stacked q/k norm weights) follow a parameter written in place and one
    replaced in its module; with q and k norms of different eps each is its own norm."""
    for name in ("talker", "one_kv"):
        model = model_of(name)
        cache, tables = pool(model.cfg, 3, 8, 16)
        att = model.layers[0].self_attn
        same_as_generic(monkeypatch, model, cache, tables, [3, 40, 90], 128)
        with torch.no_grad():
            att.q_norm.weight.mul_(0.5)
            model.layers[-1].mlp.down_proj.weight.mul_(-1.5)
        same_as_generic(monkeypatch, model, cache, tables, [3, 40, 90], 128)
        att.o_proj.weight = torch.nn.Parameter(torch.randn_like(att.o_proj.weight))
        att.k_norm.weight = torch.nn.Parameter(torch.rand_like(att.k_norm.weight) + 0.5)
        same_as_generic(monkeypatch, model, cache, tables, [3, 40, 90], 128)
        for layer in model.layers:
            layer.self_attn.k_norm.eps = 1e-2
        same_as_generic(monkeypatch, model, cache, tables, [3, 40, 90], 128)


def test_a_pool_whose_tensors_are_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's per-layer views are kept on the cache while it holds the same K and V tensors: new ones are
    written and read, not the old."""
    model = model_of("talker")
    cache, tables = pool(model.cfg, 2, 8, 16)
    x, pos, valid = torch.randn(2, 1, model.cfg.hidden_size), torch.tensor([[9], [60]]), torch.ones(2, 1, dtype=torch.bool)
    with torch.no_grad():
        model.forward_cached(x, cache, tables, pos, valid, 128)
        cache.k, cache.v = torch.randn_like(cache.k), torch.randn_like(cache.v)
    same_as_generic(monkeypatch, model, cache, tables, [9, 60], 128)
    old_k = cache.k.clone()
    with torch.no_grad():
        model.forward_cached(x, cache, tables, pos, valid, 128)
    assert not torch.equal(cache.k, old_k)  # the new K took the rows' keys


def test_the_equalities_the_row_leans_on() -> None:
    """On this CPU path (each forced-ISA leg too): `mean` is the sum then its quotient by the count, and addcdiv
    (eps + 1 * (s / n)) is that quotient plus eps, every bit (values of all magnitudes, zeros included)."""
    g = torch.Generator().manual_seed(11)
    for n in (12, 16, 40, 64, 128):
        x = torch.randn(67, n, generator=g) * 10.0 ** torch.randint(-18, 18, (67, 1), generator=g)
        x[0] = 0.0
        s = x.pow(2).sum(-1, keepdim=True)
        count, eps = torch.tensor(float(n)), torch.tensor(1e-6)
        assert torch.equal(x.pow(2).mean(-1, keepdim=True).view(torch.int32), (s / count).view(torch.int32))
        assert torch.equal(torch.addcdiv(eps, s, count).view(torch.int32), (s / count + eps).view(torch.int32))
