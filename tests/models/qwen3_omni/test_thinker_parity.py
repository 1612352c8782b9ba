"""The thinker against the reference (transformers 5.23.0, float32 CPU): input rows E, the accepted hidden
rows A, the final-norm hidden rows, logits (top-32, logsumexp, the chosen token's logprob) and the greedy ids
of the four prompts, decoded through a KV cache (prefill, then one token a step) and by full recompute."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.models.qwen3_omni.conftest import KEYS
from v2.models.aut.features import log_mel
from v2.models.qwen3_omni.thinker import Thinker
from v2.models.qwen3_omni.thinker_generate import ThinkerRun, greedy
from v2.models.rope import rope_inv_freq, rotate_half_cos_sin

TOL = dict(atol=1e-4, rtol=1e-4)  # the README's suggested check
AUDIO_ID, EOS = 151675, 151645


def prompt_rows(thinker: Thinker, ref: dict[str, np.ndarray], key: str) -> torch.Tensor:
    ids = torch.from_numpy(ref[f"{key}_thinker_input_ids"])
    audio = None
    if key == "c":  # from the waveform: features, encoder, then the placeholders
        mel = log_mel(torch.from_numpy(ref["c_audio_wave_16k"]), thinker.cfg.audio)
        audio = thinker.audio_tower.encode([mel])[0]
    return thinker.embed(ids, audio, AUDIO_ID)


@pytest.fixture(scope="module")
def runs(thinker: Thinker, oref: dict[str, np.ndarray]) -> dict[str, ThinkerRun]:
    return {k: greedy(thinker, prompt_rows(thinker, oref, k), max_new_tokens=10, eos=EOS, accept_layer=2,
                      keep_logits=True) for k in KEYS}


@pytest.mark.parametrize("key", KEYS)
def test_greedy_ids(runs: dict[str, ThinkerRun], oref: dict[str, np.ndarray], key: str) -> None:
    assert runs[key].tokens == oref[f"{key}_thinker_tokens"].tolist()


@pytest.mark.parametrize("key", KEYS)
def test_rows_and_logits(runs: dict[str, ThinkerRun], oref: dict[str, np.ndarray], key: str) -> None:
    run, ref = runs[key], lambda name: torch.from_numpy(oref[f"{key}_{name}"])
    torch.testing.assert_close(run.embed, ref("thinker_embed"), **TOL)
    torch.testing.assert_close(run.accept, ref("thinker_accept_hidden"), **TOL)
    torch.testing.assert_close(run.final, ref("thinker_final_hidden"), **TOL)
    ids, logits = ref("thinker_logits_top32_ids"), run.logits
    assert logits is not None
    torch.testing.assert_close(logits.gather(1, ids), ref("thinker_logits_top32"), **TOL)
    assert torch.equal(logits.topk(32, dim=-1).indices[:, :1], ids[:, :1])
    torch.testing.assert_close(run.logsumexp, ref("thinker_logsumexp"), **TOL)
    torch.testing.assert_close(run.logprobs, ref("thinker_token_logprob"), **TOL)
    chosen = torch.log_softmax(logits, -1).gather(1, torch.tensor(run.tokens)[:, None])[:, 0]
    assert torch.equal(chosen, run.logprobs)


@pytest.mark.parametrize("key", ["b", "c"])
def test_full_recompute_gives_the_same_rows(thinker: Thinker, runs: dict[str, ThinkerRun], oref: dict[str, np.ndarray],
                                            key: str) -> None:
    """One causal pass over prompt + fed-back tokens (no cache) against the cached decode."""
    run = runs[key]
    with torch.no_grad():
        inputs: list[torch.Tensor] = []
        h = thinker.model(run.embed[None], layer_inputs=inputs)[0]  # [T + n - 1, H]
    t = oref[f"{key}_thinker_input_ids"].shape[0]
    torch.testing.assert_close(h[t - 1 :], run.final[: h.shape[0] - t + 1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(inputs[2][0], run.accept, atol=1e-5, rtol=1e-5)


def test_reference_positions_make_plain_rope(thinker: Thinker, oref: dict[str, np.ndarray]) -> None:
    """The references' rotary positions (0 .. T-1 on all three components, then T, T+1, ...) through M-RoPE
    give plain RoPE's tables bit for bit; components that differ change the interleaved frequencies only."""
    d = thinker.cfg.text.decoder
    for key in KEYS:
        t = oref[f"{key}_thinker_input_ids"].shape[0]
        pos = torch.from_numpy(oref[f"{key}_thinker_position_ids"])[:, None]  # [3, 1, T]
        dec = torch.from_numpy(oref[f"{key}_thinker_decode_position_ids"]).T[:, None]  # [3, 1, n - 1]
        for p in (pos, dec):
            cos, sin = thinker.model.rope(p)
            plain = rotate_half_cos_sin(p[0], d.head_dim, d.rope_theta)
            assert torch.equal(cos, plain[0]) and torch.equal(sin, plain[1])
        assert torch.equal(pos[0, 0], torch.arange(t))
    moved = torch.stack([torch.zeros(1, 1), torch.full((1, 1), 5), torch.full((1, 1), 9)])  # t 0, h 5, w 9
    cos, _ = thinker.model.rope(moved)
    inv = rope_inv_freq(d.head_dim, d.rope_theta, torch.device("cpu"))
    # mrope_section [4, 2, 2], interleaved: frequencies 1, 4 read h; 2, 5 read w; the rest t
    want = torch.tensor([0, 5, 9, 0, 5, 9, 0, 0], dtype=torch.float32) * inv
    assert torch.equal(cos[0, 0], torch.cat([want, want]).cos())


def test_accepting_the_last_layer_reads_the_final_norm(thinker: Thinker, oref: dict[str, np.ndarray]) -> None:
    """accept_hidden_layer == the layer count: A is `hidden_states[-1]`, the final norm's output."""
    rows = prompt_rows(thinker, oref, "a")
    run = greedy(thinker, rows, max_new_tokens=3, eos=EOS, accept_layer=4)
    assert torch.equal(run.accept[rows.shape[0] - 1 :], run.final)
    with pytest.raises(ValueError, match="accept_layer"):
        greedy(thinker, rows, max_new_tokens=3, eos=EOS, accept_layer=5)
