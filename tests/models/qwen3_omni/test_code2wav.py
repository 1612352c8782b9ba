"""Qwen3-Omni code2wav: parity with the reference (intermediates, the whole waveform, generate()'s waveform and
the reference's lossy chunked decode, within the README's 1e-4), streamed == whole and batched == alone bit for
bit, and the both-ends-cut decoder (as the README writes it, in plain torch) at other rates and sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.models.qwen3_omni.conftest import CHECKPOINT, KEYS
from v2.models.config import BackboneConfig
from v2.models.qwen3_omni.code2wav import Code2Wav
from v2.models.qwen3_omni.config import Code2WavConfig
from v2.models.stream_conv import CodesError

TOL = dict(atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def c2w() -> Code2Wav:
    return Code2Wav.from_pretrained(CHECKPOINT)


def _codes(oref: dict, key: str) -> torch.Tensor:
    return torch.from_numpy(oref[f"{key}_codes"])[None]  # [1, F, 16]


@pytest.mark.parametrize("key", KEYS)
def test_parity(c2w: Code2Wav, oref: dict, key: str) -> None:
    trace: dict[str, torch.Tensor] = {}
    wav = c2w.decode(_codes(oref, key), trace=trace)[0].numpy()
    np.testing.assert_allclose(trace["embed_mean"][0].numpy(), oref[f"{key}_c2w_embed_mean"], **TOL)
    np.testing.assert_allclose(trace["transformer_out"][0].numpy(), oref[f"{key}_c2w_transformer_out"], **TOL)
    np.testing.assert_allclose(trace["upsampled"][0].numpy().T, oref[f"{key}_c2w_upsampled"], **TOL)
    assert wav.shape == oref[f"{key}_wav_whole"].shape == (oref[f"{key}_codes"].shape[0] * 1920 - 555,)
    np.testing.assert_allclose(wav, oref[f"{key}_wav_whole"], **TOL)
    np.testing.assert_allclose(wav, oref[f"{key}_wav_generate"], **TOL)


@pytest.mark.parametrize("key", ("a", "b"))
@pytest.mark.parametrize("chunk,context", [(3, 25), (4, 2)])
def test_reference_chunked_decode(c2w: Code2Wav, oref: dict, key: str, chunk: int, context: int) -> None:
    got = c2w.reference_chunked_decode(_codes(oref, key), chunk, context)[0].numpy()
    np.testing.assert_allclose(got, oref[f"{key}_wav_chunked_{chunk}_{context}"], **TOL)


def _stream(model: Code2Wav, codes: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """codes [1, F, G] decoded chunk by chunk (sizes sum to F) in slot 1 of a 3-slot state -> the stream's audio."""
    state = model.allocate_state(3)
    out, at = [], 0
    for n in sizes:
        chunk = model.decode_chunk(torch.tensor([1]), codes[:, at : at + n], state=state)
        out.append(chunk.audio[0, int(chunk.start[0]) :])
        at += n
    return torch.cat(out)


@pytest.mark.exact
@pytest.mark.parametrize("sizes", [[1] * 15, [3, 5, 7], [2, 13], [15]])
def test_streamed_equals_whole(c2w: Code2Wav, oref: dict, sizes: list[int]) -> None:
    codes = _codes(oref, "a")
    whole = c2w.decode(codes)[0]
    assert torch.equal(_stream(c2w, codes, sizes), whole)


@pytest.mark.exact
def test_batched_equals_alone(c2w: Code2Wav, oref: dict) -> None:
    """Streams at different points (one starting, one mid-way, one padded) in each call == each alone."""
    codes = {k: _codes(oref, k)[0] for k in ("a", "b", "c")}
    alone = {k: c2w.decode(v[None])[0] for k, v in codes.items()}
    state = c2w.allocate_state(4)
    plan = {"a": [4, 4, 4, 3], "b": [0, 4, 4, 1], "c": [3, 4, 4, 4]}  # frames per call (0: not in that call)
    got: dict[str, list[torch.Tensor]] = {k: [] for k in plan}
    done = {k: 0 for k in plan}
    slot = {"a": 0, "b": 1, "c": 3}
    for call in range(4):
        rows = [k for k in plan if plan[k][call]]
        n = max(plan[k][call] for k in rows)
        batch = torch.zeros(len(rows) + 1, n, 16, dtype=torch.long)  # + a padding row in the dummy slot
        for i, k in enumerate(rows):
            m = plan[k][call]
            batch[i, :m] = codes[k][done[k] : done[k] + m]
        lengths = torch.tensor([plan[k][call] for k in rows] + [1])
        slots = torch.tensor([slot[k] for k in rows] + [state.dummy_slot])
        chunk = c2w.decode_chunk(slots, batch, state=state, lengths=lengths)
        for i, k in enumerate(rows):
            got[k].append(chunk.audio[i, int(chunk.start[i]) : plan[k][call] * c2w.hop])
            done[k] += plan[k][call]
    for k in plan:
        assert torch.equal(torch.cat(got[k]), alone[k]), k


@pytest.mark.exact
def test_padded_whole_decode(c2w: Code2Wav, oref: dict) -> None:
    a, b = _codes(oref, "a")[0], _codes(oref, "b")[0]
    batch = torch.zeros(2, a.shape[0], 16, dtype=torch.long)
    batch[0], batch[1, : b.shape[0]] = a, b
    wav = c2w.decode(batch, torch.tensor([a.shape[0], b.shape[0]]))
    end = b.shape[0] * c2w.hop - c2w.lead
    assert torch.equal(wav[0], c2w.decode(a[None])[0])
    assert torch.equal(wav[1, :end], c2w.decode(b[None])[0])
    assert not wav[1, end:].any()


def test_bad_codes_name_the_argument(c2w: Code2Wav) -> None:
    with pytest.raises(CodesError, match="codes"):
        c2w.decode(torch.zeros(1, 3, 15, dtype=torch.long))
    with pytest.raises(CodesError, match="codes"):
        c2w.decode(torch.full((1, 3, 16), 2048))


# ----- other sizes: the README's decoder in plain torch --------------------------------------------------------
def _small(rates: tuple[int, ...], ratios: tuple[int, ...], seed: int) -> Code2Wav:
    tr = BackboneConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8, intermediate_size=24,
                        vocab_size=4 * 32, rms_norm_eps=1e-5, rope_theta=10000.0)
    model = Code2Wav(Code2WavConfig(transformer=tr, codebook_size=32, num_quantizers=4, sliding_window=3,
                                    decoder_dim=32, upsample_rates=rates, upsampling_ratios=ratios))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise, leaf = torch.randn(p.shape, generator=gen), name.rpartition(".")[2]
            if p.dim() > 1:
                p.copy_(noise / math.prod(p.shape[1:]) ** 0.5)
            else:  # SnakeBeta's log-scales near 0, residual scales 0.1, biases small, norms near 1
                p.copy_({"alpha": 0.1 * noise, "beta": 0.1 * noise, "scale": 0.1 + 0.01 * noise,
                         "gamma": 0.1 + 0.01 * noise, "bias": 0.02 * noise}.get(leaf, 1.0 + 0.1 * noise))
    return model.eval()


def _snake(x: torch.Tensor, m: torch.nn.Module) -> torch.Tensor:  # x [C, L]
    return x + torch.sin(x * torch.exp(m.alpha)[:, None]) ** 2 / (torch.exp(m.beta)[:, None] + 1e-9)


def _causal(x: torch.Tensor, conv: torch.nn.Conv1d) -> torch.Tensor:
    pad = (conv.kernel_size[0] - 1) * conv.dilation[0]
    return F.conv1d(F.pad(x[None], (pad, 0)), conv.weight, conv.bias, dilation=conv.dilation)[0]


def _plain_decoder(model: Code2Wav, x: torch.Tensor) -> torch.Tensor:
    """README step 4 from the upsampled channels x [H, 4F]: cut r samples at BOTH ends of each transposed conv."""
    dec = model.decoder
    x = _causal(x, dec[0].conv)
    for block in list(dec)[1:-2]:
        snake, up, *units = block.block
        r = up.stride
        x = F.conv_transpose1d(_snake(x, snake)[None], up.conv.weight, up.conv.bias, stride=r)[0, :, r:-r]
        for u in units:
            x = x + _causal(_snake(_causal(_snake(x, u.act1), u.conv1.conv), u.act2), u.conv2.conv)
    return _causal(_snake(x, dec[-2]), dec[-1].conv).clamp(-1, 1)[0]


@pytest.mark.parametrize("rates,ratios", [((3, 2), (2,)), ((2, 5, 2), (3, 1))])
def test_other_rates_match_the_readme(rates: tuple[int, ...], ratios: tuple[int, ...]) -> None:
    """In float64 (random weights amplify float32 rounding through the snakes) the streamed causal form with its
    zeroed lead equals the README's both-ends cut to 1e-10; in float32 streamed == whole bit for bit."""
    codes = torch.randint(0, 32, (1, 6, 4), generator=torch.Generator().manual_seed(1))
    model = _small(rates, ratios, seed=len(rates)).double()
    trace: dict[str, torch.Tensor] = {}
    wav = model.decode(codes, trace=trace)[0]
    with torch.no_grad():
        ref = _plain_decoder(model, trace["upsampled"][0].T)
    assert wav.shape == ref.shape == (6 * model.hop - model.lead,)
    torch.testing.assert_close(wav, ref, atol=1e-10, rtol=1e-10)
    model32 = _small(rates, ratios, seed=len(rates))
    assert torch.equal(_stream(model32, codes, [1, 2, 3]), model32.decode(codes)[0])


def test_release_dims_on_meta(oconfig: dict) -> None:
    """code2wav at the release's widths, on the meta device: key shapes, 1920 samples a frame, a lead of 555."""
    from tests.models.qwen3_omni.test_talker import release_dims
    from v2.models.qwen3_omni.loader import release_layout
    from v2.models.weights import empty_model

    cfg = release_dims(oconfig).code2wav
    assert cfg is not None
    model = empty_model(Code2Wav, cfg)
    shapes = {k: v.shape for k, v in release_layout(model).items()}
    assert (model.hop, model.lead) == (1920, 555)
    assert shapes["code_embedding.weight"] == (16 * 2048, 1024)
    assert shapes["pre_transformer.layers.7.self_attn.q_proj.weight"] == (1024, 1024)
    assert shapes["pre_transformer.layers.7.mlp.down_proj.weight"] == (1024, 3072)
    assert shapes["upsample.1.0.conv.weight"] == (1024, 1024, 2)
    assert shapes["upsample.1.1.pwconv1.weight"] == (4096, 1024)
    assert shapes["decoder.0.conv.weight"] == (1536, 1024, 7)
    assert shapes["decoder.1.block.1.conv.weight"] == (1536, 768, 16)
    assert shapes["decoder.4.block.1.conv.weight"] == (192, 96, 6)
    assert shapes["decoder.4.block.4.conv1.conv.weight"] == (96, 96, 7)
    assert shapes["decoder.6.conv.weight"] == (1, 96, 7)
    assert not any("input_proj" in k or "output_proj" in k or "pre_conv" in k for k in shapes)
