"""The fused sampling kernel draws what `sampling.sample` draws, with the same logprobs.

Without CUDA the kernel runs in Triton's interpreter (conftest sets TRITON_INTERPRET); its sm_90 build is
checked by compiling it here.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.models.kernels import sample as sk
from v2.models.sampling import apply_repetition_penalty, gumbel_noise, sample
from v2.sampling_settings import CHANNELS

pytestmark = pytest.mark.skipif(sk.triton is None, reason="needs triton")


def _reference(logits, temp, top_k, top_p, seed, steps, channel, presence, penalty, groups=CHANNELS, banned=None,
               stop=None):
    """The plain torch path: penalty, the masks, then `sample` with the noise of counter steps * groups + channel."""
    if presence is not None:
        logits = apply_repetition_penalty(logits, presence, penalty)
    if banned is not None:
        logits = logits.masked_fill(banned[None], float("-inf"))
    if stop is not None:
        blocked = torch.zeros_like(logits, dtype=torch.bool)
        blocked[:, stop[0]] = ~stop[1]
        logits = logits.masked_fill(blocked, float("-inf"))
    return sample(logits, temp, top_k, top_p, gumbel_noise(seed, steps * groups + channel, logits.shape[1]))


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_fused_draw_equals_the_torch_sampler(data):
    # vocabularies up to 200 here: the interpreter's sort of a 2048-wide block takes seconds a row
    vocab = data.draw(st.sampled_from([2, 17, 64, 65, 200]), label="vocab")
    b = data.draw(st.integers(1, 4), label="rows")
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16), label="seed"))
    logits = torch.randn(b, vocab, generator=g) * data.draw(st.sampled_from([0.5, 3.0, 20.0]), label="scale")
    if data.draw(st.booleans(), label="ties"):
        logits = (logits * 2).round() / 2  # many equal values: the stable order decides
    if data.draw(st.booleans(), label="masked"):
        logits[:, 1::3] = float("-inf")  # as the stop head before min_frames
    temp = torch.tensor(data.draw(st.lists(st.sampled_from([0.0, 5e-5, 0.3, 1.0, 1.7]), min_size=b, max_size=b)))
    top_k = torch.tensor(data.draw(st.lists(st.sampled_from([0, 1, 3, 25, 64, 100, vocab]), min_size=b, max_size=b)))
    top_p = torch.tensor(data.draw(st.lists(st.sampled_from([0.05, 0.3, 0.8, 0.95, 1.0]), min_size=b, max_size=b)))
    seed = torch.tensor(data.draw(st.lists(st.integers(-2**62, 2**62), min_size=b, max_size=b)))
    steps = torch.tensor(data.draw(st.lists(st.integers(0, 10**6), min_size=b, max_size=b)))
    groups = data.draw(st.sampled_from([1, 5, CHANNELS, 16, 32]), label="groups")  # any family's group count
    channel = data.draw(st.integers(0, groups - 1), label="channel")
    presence = penalty = banned = stop = None
    if data.draw(st.booleans(), label="penalty"):
        presence = torch.rand(b, vocab, generator=g) < 0.2
        penalty = torch.tensor(data.draw(st.lists(st.sampled_from([1.0, 1.3, 0.8]), min_size=b, max_size=b)))
    if vocab > 2 and data.draw(st.booleans(), label="masks"):  # ids never drawn, and a stop id not always allowed
        banned = torch.zeros(vocab, dtype=torch.bool)
        banned[vocab // 2:: 5] = True
        stop = (vocab // 2 + 1, torch.tensor(data.draw(st.lists(st.booleans(), min_size=b, max_size=b))))
    ids, lp = sk.sample_fused(logits, temp, top_k, top_p, seed, steps, channel, presence, penalty, groups=groups,
                              banned=banned, stop=stop)
    want_ids, want_lp = _reference(logits, temp, top_k, top_p, seed, steps, channel, presence, penalty, groups,
                                   banned, stop)
    assert ids.tolist() == want_ids.tolist()
    torch.testing.assert_close(lp, want_lp, atol=1e-5, rtol=1e-5)


def test_fused_draw_at_the_codebook_size():
    """1025 tokens (1024 codes + pad), the release's codebook head: ties, a penalty, top-k and top-p."""
    g = torch.Generator().manual_seed(5)
    logits = (torch.randn(2, 1025, generator=g) * 6).round() / 2
    settings = torch.tensor([[1.7, 25, 0.8, 1.2, 11], [0.0, 0, 1.0, 1.2, 12]]).T  # columns of a [5, 2] table: strided
    args = (settings[0], settings[1].long(), settings[2], torch.tensor([11, 12]), torch.tensor([40, 41]), 5,
            torch.rand(2, 1025, generator=g) < 0.3, settings[3])
    ids, lp = sk.sample_fused(logits, *args, groups=CHANNELS)
    want_ids, want_lp = _reference(logits, *args)
    assert ids.tolist() == want_ids.tolist()
    torch.testing.assert_close(lp, want_lp, atol=1e-5, rtol=1e-5)


def test_raw_greedy_logprobs_score_greedy_rows_under_their_logits():
    """With `raw_greedy_logprobs` a greedy row reports log_softmax(logits)[id] (after the masks), a sampled row
    the processed distribution's logprob as without it; the ids do not change."""
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(4, 200, generator=g) * 4
    temp, top_k = torch.tensor([0.0, 0.9, 0.0, 1.3]), torch.tensor([0, 50, 3, 0])
    top_p = torch.tensor([1.0, 1.0, 0.5, 0.8])
    seed, steps = torch.tensor([3, 4, 5, 6]), torch.tensor([0, 1, 2, 3])
    banned = torch.zeros(200, dtype=torch.bool)
    banned[7::9] = True
    ids, lp = sk.sample_fused(logits, temp, top_k, top_p, seed, steps, 4, groups=32, banned=banned,
                              raw_greedy_logprobs=True)
    want_ids, want_lp = _reference(logits, temp, top_k, top_p, seed, steps, 4, None, None, 32, banned)
    raw = torch.log_softmax(logits.masked_fill(banned[None], float("-inf")), dim=-1).gather(1, want_ids[:, None])[:, 0]
    assert ids.tolist() == want_ids.tolist()
    torch.testing.assert_close(lp, torch.where(temp < 1e-4, raw, want_lp), atol=1e-5, rtol=1e-5)
    assert (lp[[0, 2]] < 0).all()  # not the point mass's 0


def test_fused_draw_refuses_an_oversized_vocabulary():
    with pytest.raises(ValueError, match="4096"):
        sk.sample_fused(torch.zeros(1, 70000), *(torch.ones(1),) * 3, torch.zeros(1, dtype=torch.long),
                        torch.zeros(1, dtype=torch.long), 0, groups=1)
    with pytest.raises(ValueError, match="group 16 outside the frame's 16 groups"):
        sk.sample_fused(torch.zeros(1, 8), *(torch.ones(1),) * 3, torch.zeros(1, dtype=torch.long),
                        torch.zeros(1, dtype=torch.long), 16, groups=16)


COMPILE_FOR_HOPPER = """
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from v2.models.kernels import sample as sk

sig = {"logits_ptr": "*bf16", "seen_ptr": "*u8", "penalty_ptr": "*fp32", "banned_ptr": "*u8", "allowed_ptr": "*u8",
       "temp_ptr": "*fp32", "top_k_ptr": "*i64", "top_p_ptr": "*fp32", "seed_ptr": "*i64", "steps_ptr": "*i64",
       "ids_ptr": "*i64", "logprobs_ptr": "*fp32",
       **{s: "i32" for s in ("s_logits", "s_seen", "s_pen", "s_allowed", "s_temp", "s_k", "s_p", "s_seed", "s_steps")},
       "vocab": "i32", "groups": "i32", "group": "i32", "stop_id": "i32", "min_temperature": "fp32",
       "HAS_PRESENCE": "constexpr", "HAS_BANNED": "constexpr", "HAS_STOP": "constexpr", "RAW_GREEDY": "constexpr",
       "BLOCK_V": "constexpr"}
# a MOSS codebook (1025 tokens), its stop head (2), Qwen3-TTS's group 0 (3072: penalty, masks) and code group (2048),
# CSM's codebooks (2051, greedy rows scored under the raw logits)
for presence, masks, raw, block in ((True, False, False, 2048), (False, False, False, 16), (True, True, False, 4096),
                                    (False, False, False, 2048), (False, False, True, 4096)):
    consts = {"HAS_PRESENCE": presence, "HAS_BANNED": masks, "HAS_STOP": masks, "RAW_GREEDY": raw, "BLOCK_V": block}
    src = ASTSource(fn=sk._sample_kernel, signature=sig, constexprs=consts)
    print(len(compile(src, target=GPUTarget("cuda", 90, 32)).asm["cubin"]))
"""


def test_kernel_compiles_for_hopper_without_a_gpu(hopper_compile):
    assert [n > 0 for n in hopper_compile(COMPILE_FOR_HOPPER)] == [True] * 5


@torch.no_grad()
def test_decode_frame_through_the_kernels_equals_the_torch_path(tiny_card, monkeypatch):
    """A whole frame (stop head with and without allow_stop, 12 codebooks fed back through the local
    transformer) with mixed settings and a repetition penalty: same codes, same logprobs. A 60-code
    codebook keeps the interpreter quick."""
    from v2.models import kernels
    from v2.models.moss_tts_local.model import MossTTSLocal
    from v2.models.sampling import SamplingTensors
    from v2.sampling_settings import SamplingSettings

    config = {**tiny_card.seeded["tts"].config, "audio_vocab_size": 60, "audio_pad_code": 60}
    model = MossTTSLocal.from_seed(config, 3)
    settings = [SamplingSettings(), SamplingSettings.uniform(0.0), SamplingSettings.uniform(1.1, 0, 0.9, 1.4)]
    s = SamplingTensors.build(settings, [1, 2, 3])
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, model.cfg.hidden_size, generator=g) * 3
    presence = torch.rand(3, 12, model.cfg.codebook_size, generator=g) < 0.3
    frames = []
    for force in (False, True):
        monkeypatch.setattr(kernels, "FORCE", force)
        frames.append(model.decode_frame(hidden, s, torch.tensor([0, 4, 9]), presence=presence,
                                         allow_stop=torch.tensor([True, False, True])))
    torch_path, fused = frames
    assert torch.equal(fused.codes, torch_path.codes) and torch.equal(fused.stop, torch_path.stop)
    assert not fused.stop[1]  # allow_stop=False forces "continue"
    torch.testing.assert_close(fused.logprobs, torch_path.logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused.next_embed, torch_path.next_embed)
