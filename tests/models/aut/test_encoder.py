"""The AuT layer stack's one form: several clips' rows through `AudioEncoder.encode_rows` together (every
attention window in one masked call, the linears on kept tiles) == each clip alone == the layer written out
window by window, bit for bit on the CPU; `Windows`' layout; the kept tiles reused across calls of other sizes;
autograd on at the call; the device forms (F.linear, SDPA under the key mask) agree on the CPU."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor

from tests.models.aut.window_reference import layer_by_window, stack_by_window
from v2.models import exact
from v2.models.aut.config import AudioEncoderConfig
from v2.models.aut.encoder import AudioEncoder, Windows, encoder_layer
from v2.models.aut.kept import KeptBuffers

# n_window_infer 200: windows of 26 rows, so a clip of 70 rows has three (26, 26, 18)
CFG = AudioEncoderConfig(num_mel_bins=128, d_model=64, num_layers=2, num_heads=4, ffn_dim=128,
                         downsample_hidden_size=8, output_dim=48, n_window=50, n_window_infer=200,
                         max_source_positions=1500)
SIZES = [70, 26, 5, 52, 1]  # rows per clip: part windows, one whole window, two whole windows, one row


@pytest.fixture(scope="module")
def tower() -> AudioEncoder:
    model = AudioEncoder(CFG)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.02, generator=gen)
            elif p.dim() == 1:  # layer norms
                p.normal_(1.0, 0.02, generator=gen)
            else:
                p.normal_(0.0, p[0].numel() ** -0.5, generator=gen)
    return model.eval()


def _rows(seed: int) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, CFG.d_model, generator=gen) for n in SIZES]


def test_windows_layout() -> None:
    w = Windows.of([30, 5, 26], 13, torch.device("cpu"))  # windows (0, 13) (13, 13) (26, 4) (30, 5) (35, 13) (48, 13)
    assert (w.sizes, w.count, w.width) == ((30, 5, 26), 6, 13)
    assert w.gather is not None and w.back is not None and w.keys is not None
    assert w.gather.view(6, 13)[2].tolist() == [26, 27, 28, 29] + [0] * 9
    assert w.gather.view(6, 13)[3].tolist() == [30, 31, 32, 33, 34] + [0] * 8
    assert torch.equal(w.gather[w.back], torch.arange(61))  # each row's slot reads that row
    assert w.keys.shape == (6, 1, 1, 13) and w.keys.sum().item() == 61
    full = Windows.of([26, 13], 13, torch.device("cpu"))  # every window whole: nothing gathered or masked
    assert (full.count, full.width, full.gather, full.back, full.keys) == (3, 13, None, None, None)
    assert Windows.of([5], 13, torch.device("cpu")).gather is None  # one window, shorter than `window`
    with pytest.raises(ValueError, match="windows"):
        Windows.of([4, 0], 13, torch.device("cpu"))


@pytest.mark.exact
def test_clips_together_equal_each_alone_and_the_written_out_layer(tower: AudioEncoder) -> None:
    rows = _rows(1)
    with torch.no_grad():
        want = [stack_by_window(tower, r) for r in rows]
        bufs = KeptBuffers()
        for order in ([0, 1, 2, 3, 4], [3], [4, 0, 2], [1, 0]):  # the kept tiles shrink and grow between calls
            got = tower.encode_rows([rows[i] for i in order], bufs)
            for i, g in zip(order, got):
                assert g.shape == want[i].shape and torch.equal(g, want[i]), (order, i)
        for r in rows:  # the one-clip layer is the same function with one clip
            assert torch.equal(tower.layers[0](r, tower.window), layer_by_window(tower.layers[0], r, tower.window))


@pytest.mark.exact
def test_encode_is_the_stack_on_the_conv_rows(tower: AudioEncoder) -> None:
    gen = torch.Generator().manual_seed(2)
    mels = [torch.randn(128, n, generator=gen) for n in (540, 40)]  # 70 rows (three windows) and 5
    with torch.no_grad():
        want = [stack_by_window(tower, r) for r in tower.conv_rows(mels)]
    got = tower.encode(mels)  # autograd on at the call: the layers run without it (their tiles are written in place)
    assert [g.shape[0] for g in got] == [70, 5] and not any(g.requires_grad for g in got)
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_kept_buffers_over_the_cap_are_made_per_call(tower: AudioEncoder) -> None:
    rows = _rows(3)
    with torch.no_grad():
        want = tower.encode_rows(rows)
        capped = KeptBuffers(keep=12000)  # [160, 64] tiles kept, [160, 128] ones not
        got = tower.encode_rows(rows, capped)
        x = torch.cat(rows)
        one = encoder_layer(tower.layers[0], x, Windows.of(SIZES, tower.window, x.device), capped)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    kept = capped._flat
    assert one.shape == x.shape and "h" in kept and "ffn" not in kept and max(b.numel() for b in kept.values()) <= 12000


def test_the_device_forms_agree(tower: AudioEncoder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The forms a GPU runs (F.linear, one SDPA call under the key mask), run here on the CPU by taking
    `exact.on` as false: the rows of the exact forms to float32 rounding."""
    rows = _rows(4)
    with torch.no_grad():
        want = tower.encode_rows(rows)
        monkeypatch.setattr(exact, "on", lambda x: False)
        got = copy.deepcopy(tower).encode_rows(rows)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.exact
def test_a_non_finite_first_row_stays_in_its_own_clip(tower: AudioEncoder) -> None:
    """Padding slots read row 0: a NaN there must not reach another clip's short windows through their masked
    keys (their values are -0.0, not 0 x row 0)."""
    rows = _rows(2)
    bad = rows[0].clone()
    bad[0] = float("inf")
    with torch.no_grad():
        alone = [tower.encode_rows([r])[0] for r in rows[1:]]
        got = tower.encode_rows([bad, *rows[1:]])
    for g, want in zip(got[1:], alone):
        assert torch.isfinite(g).all() and torch.equal(g, want)
