"""The aligner's batched encoder == the one-clip-at-a-time encoding, bit for bit on the CPU: every clip's chunks
in the same conv calls (one patch copy per kernel tap into kept buffers), every clip's rows in the same layer
calls and every attention window in one masked call give each clip the rows its own encoding gives, whatever
else is in the call and whatever an earlier call left in the kept buffers; the batch's prompts in one embedding
and one head call give each clip's own marker logits and classes."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from tests.models.aut.window_reference import stack_by_window
from v2.bench.launches import counted
from v2.models import exact
from v2.models.aut.encoder import sinusoids
from v2.models.aut.features import audio_token_count
from v2.models.forced_aligner.align import prompt_ids
from v2.models.forced_aligner.features import audio_tokens
from v2.models.forced_aligner.launches import dims_config, random_model
from v2.models.forced_aligner.model import CONV_TILE, ForcedAligner

# frames per clip: a part chunk, exact chunks, a clip over one attention window (3 windows: 104, 104, 13 rows)
LENGTHS = [40, 200, 1700, 101, 5]


@torch.no_grad()
def _one_clip(model: ForcedAligner, mel: Tensor) -> Tensor:
    """One clip alone, as the release encodes it: F.unfold convs in `CONV_TILE`-row exact calls, then the AuT
    layers written out, window by window (each window its own attention call)."""
    tower, chunk = model.audio_tower, 2 * model.cfg.audio.n_window
    c = -(-mel.shape[1] // chunk)
    x = F.pad(mel, (0, c * chunk - mel.shape[1])).view(mel.shape[0], c, chunk).transpose(0, 1)[:, None]
    for conv in (tower.conv2d1, tower.conv2d2, tower.conv2d3):
        b, _, hf, t = x.shape
        ho, to = (hf - 1) // 2 + 1, (t - 1) // 2 + 1
        patches = F.unfold(x, 3, padding=1, stride=2).transpose(1, 2)  # [B, ho * to, C * 9]
        y = exact.linear(patches, conv.weight.flatten(1), conv.bias, tile=CONV_TILE)
        x = exact.gelu(y.transpose(1, 2).reshape(b, -1, ho, to))
    b, ch, f, t = x.shape
    x = tower.conv_out(x.permute(0, 3, 1, 2).reshape(b, t, ch * f)) + sinusoids(t, model.cfg.audio.d_model, x.device)
    return stack_by_window(tower, x.reshape(b * t, -1)[: audio_token_count(mel.shape[1], model.cfg.audio)])


@pytest.fixture(scope="module")
def model() -> ForcedAligner:
    torch.manual_seed(0)
    return random_model(dims_config("tiny", 2, 1))


@pytest.mark.exact
def test_batched_encoding_equals_each_clip_alone(model: ForcedAligner) -> None:
    gen = torch.Generator().manual_seed(5)
    mels = [torch.randn(128, n, generator=gen) for n in LENGTHS]
    alone = [_one_clip(model, m) for m in mels]
    with torch.no_grad():
        for order in ([0, 1, 2, 3, 4], [4, 2, 0], [1], [3, 1, 2, 0, 4]):  # the buffers shrink and grow between calls
            got = model.encode([mels[i] for i in order])
            for i, g in zip(order, got):
                assert g.shape == alone[i].shape and torch.equal(g, alone[i]), (order, i)


def test_batch_shares_the_calls(model: ForcedAligner) -> None:
    gen = torch.Generator().manual_seed(6)
    mels = [torch.randn(128, 200, generator=gen) for _ in range(4)]
    with torch.no_grad():
        one = sum(counted(lambda: model.encode(mels[:1]), use_kernels=False).values())
        four = sum(counted(lambda: model.encode(mels), use_kernels=False).values())
    assert four < 2 * one  # the clips' rows share the calls (a loop per clip made about 4x)


def test_encode_names_a_bad_clip(model: ForcedAligner) -> None:
    with pytest.raises(ValueError, match=r"mels\[1\]"):
        model.encode([torch.zeros(128, 10), torch.zeros(80, 10)])
    with pytest.raises(ValueError, match="mels"):
        model.encode([])


@pytest.mark.exact
def test_marker_classes_are_each_clips_argmax(model: ForcedAligner) -> None:
    gen = torch.Generator().manual_seed(7)
    mels = [torch.randn(128, n, generator=gen) for n in (200, 57, 310)]
    words = [((70, 71), (72,)), ((73,),), ((74,), (75, 76), (77,))]
    ids = [torch.tensor(prompt_ids(w, audio_tokens(m.shape[1], model.cfg.audio), model.cfg.ids))
           for w, m in zip(words, mels)]
    with torch.no_grad():
        alone = [model.marker_logits([i], [m])[0] for i, m in zip(ids, mels)]
        classes = model.marker_classes(ids, mels)
    assert [a.shape[0] for a in alone] == [4, 2, 6]
    assert classes.tolist() == torch.cat([a.argmax(-1) for a in alone]).tolist()


def test_marker_logits_names_a_prompt_whose_pads_do_not_match(model: ForcedAligner) -> None:
    mels = [torch.zeros(128, 200), torch.zeros(128, 200)]
    good = torch.tensor(prompt_ids([(70,)], audio_tokens(200, model.cfg.audio), model.cfg.ids))
    short = torch.tensor(prompt_ids([(70,)], audio_tokens(200, model.cfg.audio) - 1, model.cfg.ids))
    with pytest.raises(ValueError, match=r"input_ids\[1\]: 25 <\|audio_pad\|> ids for 26 audio rows"):
        model.marker_logits([good, short], mels)


def test_a_bfloat16_model_encodes_float32_features() -> None:
    model = random_model(dims_config("tiny", 1, 1), dtype=torch.bfloat16)
    with torch.no_grad():
        out = model.encode([torch.randn(128, 130), torch.randn(128, 40)])
    assert [tuple(o.shape) for o in out] == [(17, 64), (5, 64)] and out[0].dtype == torch.bfloat16


def test_a_copied_model_encodes_with_its_own_tower_and_buffers(model: ForcedAligner) -> None:
    mels = [torch.randn(128, 150, generator=torch.Generator().manual_seed(8))]
    with torch.no_grad():
        want = model.encode(mels)[0]
        twin = copy.deepcopy(model)
        assert twin._encoder.tower is twin.audio_tower and twin._encoder.bufs is not model._encoder.bufs
        assert torch.equal(twin.encode(mels)[0], want)


def test_buffers_over_the_cap_are_not_kept(model: ForcedAligner, monkeypatch: pytest.MonkeyPatch) -> None:
    from v2.models.forced_aligner import encoder

    mels = [torch.randn(128, n, generator=torch.Generator().manual_seed(9)) for n in (230, 40)]
    with torch.no_grad():
        want = model.encode(mels)
        monkeypatch.setattr(encoder, "KEEP_ELEMENTS", 4096)
        twin = copy.deepcopy(model)  # fresh buffers
        got = twin.encode(mels)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    kept = twin._encoder.bufs._flat
    assert kept and max(b.numel() for b in kept.values()) <= 4096


def test_the_device_forms_agree(model: ForcedAligner, monkeypatch: pytest.MonkeyPatch) -> None:
    """The forms a GPU runs (F.linear, SDPA with the key mask, one strided patch copy), run here on the CPU by
    taking `exact.on` as false: the same rows to float32 rounding."""
    gen = torch.Generator().manual_seed(10)
    mels = [torch.randn(128, n, generator=gen) for n in LENGTHS]
    with torch.no_grad():
        want = model.encode(mels)
        monkeypatch.setattr(exact, "on", lambda x: False)
        got = copy.deepcopy(model).encode(mels)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
