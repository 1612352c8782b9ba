"""The tiny CSM fixture reproduced through the runtime (`csm_1b`'s card on the fixture checkpoint, float32 on
the CPU): every prompt's greedy frames (codes exact, the stop frame and where it falls), the audio the
reference decodes (the all-zero stop frame cut), every frame's per-codebook logprobs, the prompt rows, and the
context audio's Mimi codes as the front loop encodes them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.families.csm.rows import embed_rows

from .conftest import GREEDY, KEYS, ROLLOUT, request_of

pytestmark = pytest.mark.exact
TOL = dict(atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def greedy(crt, cref):
    return {k: crt.submit(request_of(cref, k, max_frames=8, **GREEDY, **ROLLOUT)).result() for k in KEYS}


@pytest.mark.parametrize("key", KEYS)
def test_greedy_frames_stop_and_logprobs(greedy, cref, key):
    r = greedy[key]
    t = r.trajectory
    stop = int(cref[f"{key}_gen_stop_frame"])
    np.testing.assert_array_equal(t.codes, cref[f"{key}_gen_codes"])  # every frame made, the stop frame included
    assert r.finish_reason == ("stop" if stop >= 0 else "length") and r.error is None
    assert t.stop_decisions.tolist() == [i == stop for i in range(len(t.codes))]
    np.testing.assert_allclose(t.logprobs, cref[f"{key}_gen_logprobs"], **TOL)


@pytest.mark.parametrize("key", KEYS)
def test_audio_is_the_reference_decode(greedy, cref, key):
    r = greedy[key]
    wav = cref[f"{key}_gen_wav"]
    frames = len(wav) // 1920
    np.testing.assert_array_equal(r.codes, cref[f"{key}_gen_codes"][:frames])  # the decoded frames: stop cut
    assert r.audio.shape == (1, len(wav)) and r.sample_rate == 24000
    np.testing.assert_allclose(r.audio[0], wav, atol=1e-4, rtol=0)


def test_s1_stops_at_its_stop_frame(greedy, cref):
    r = greedy["s1"]
    assert int(cref["s1_gen_stop_frame"]) == 6 and len(r.trajectory.codes) == 7 and len(r.codes) == 6
    assert r.metrics.frames == 6 and r.segments[0].finish_reason == "stop"


@pytest.mark.parametrize("key", KEYS)
def test_prompt_rows(crt, cref, key):
    fam = crt.family
    work = fam.prepare(fam.parse(request_of(cref, key)))
    rows = work.rows.clone()
    if key == "ctx":  # the context frames as the reference encoded them (the front loop's are checked below)
        audio = rows[:, 0] == fam.cfg.ids.audio
        rows[audio, 1:] = torch.from_numpy(cref["ctx_context_codes"])
    assert rows[:, 0].tolist() == cref[f"{key}_input_ids"].tolist()
    with torch.no_grad():
        x = embed_rows(fam.model, rows)
    np.testing.assert_allclose(x.numpy(), cref[f"{key}_prompt_embeds"], **TOL)


def test_context_audio_encodes_to_the_reference_codes(crt, cref):
    codes = crt.encode_audio((cref["ctx_context_wav"], 24000))
    np.testing.assert_array_equal(codes, cref["ctx_context_codes"])


def test_encoded_codec_reference(crt, ccodec_ref):
    for name in ("wav0", "wav1"):
        np.testing.assert_array_equal(crt.encode_audio((ccodec_ref[name], 24000)), ccodec_ref[f"{name}_codes"])
