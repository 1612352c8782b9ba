"""The Qwen3-TTS family reproduces the tiny reference (float32, CPU): through its modules (prompt rows, the
streaming codec) and end to end through `Runtime.from_card` with the request fields (greedy forced
continue with and without the penalty, free runs with their stops and audio, the batch of two).

Budgets: `max_frames` = frames produced (the reference's `max_new_tokens` - 1 for a run that never stops);
forced continue = `min_frames == max_frames` (the stop id masked at every choice that makes a frame).
Floats: atol = rtol = 1e-4; codes exact.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.families.qwen3_tts.codec import ChunkPlan
from v2.families.qwen3_tts.codec_executor import CodecExecutor
from v2.families.qwen3_tts.prepare import with_encoded
from v2.families.qwen3_tts.request import parse
from v2.families.qwen3_tts.talker_executor import TalkerExecutor

from .conftest import GREEDY, KEYS, request_of

TOL = dict(atol=1e-4, rtol=1e-4)
N, FREE = 5, 9  # forced frames; a free run's budget of 10 choices = 9 frames


def close(actual, expected) -> None:
    torch.testing.assert_close(torch.as_tensor(np.asarray(actual)).float(), torch.from_numpy(expected).float(), **TOL)


@pytest.mark.parametrize("key", KEYS)
def test_prompt_rows_and_trailing_text(qrt, qref, qmeta, key):
    """prepare -> int rows -> embed_rows equals the reference's prompt rows; the trailing ids its text rows."""
    fam = qrt.family
    work = fam.prepare(parse(request_of(qmeta, qref, key)))
    icl = key in ("icl", "icln")
    rows = with_encoded(work, fam.code_width, qref["spk_embedding"] if key in ("xv", "icl", "icln") else None,
                        qref["icl_ref_codes"] if icl else None)
    ex = TalkerExecutor(fam.model, num_slots=1, max_len=64, batch_buckets=[1], num_blocks=8, graphs=False)
    ex.admit_device(0, work.sampling, 0, torch.from_numpy(qref["spk_embedding"]))
    with torch.no_grad():
        embedded = ex.embed_rows(rows[None], torch.tensor([0]))[0]
        trailing = fam.model.embed_text(torch.tensor(work.trailing))
    close(embedded, qref[f"{key}_prompt_embeds"])
    close(trailing, qref[f"{key}_trailing_text"])


@pytest.mark.parametrize("key", KEYS)
def test_end_to_end(qrt, qref, qmeta, key):
    """Forced continue (p = 1 and 1.05) and the free run, submitted together, through the runtime."""
    gen, rep, free = qrt.submit_many([
        request_of(qmeta, qref, key, **GREEDY, max_frames=N, min_frames=N),
        request_of(qmeta, qref, key, **{**GREEDY, "repetition_penalty": 1.05}, max_frames=N, min_frames=N),
        request_of(qmeta, qref, key, **GREEDY, max_frames=FREE)])
    gen, rep, free = gen.result(), rep.result(), free.result()
    np.testing.assert_array_equal(gen.codes, qref[f"{key}_gen_codes"])
    np.testing.assert_array_equal(rep.codes, qref[f"{key}_rep_codes"])
    np.testing.assert_array_equal(free.codes, qref[f"{key}_free_codes"])
    assert gen.finish_reason == rep.finish_reason == "length"
    assert free.finish_reason == ("stop" if qmeta["natural_stops"][key]["stopped_by_eos"] else "length")
    if f"{key}_free_wav" in qref:  # the public API's audio (for ICL: reference codes prepended, their part cut)
        close(free.audio[0], qref[f"{key}_free_wav"])


def test_batch_of_two(qrt, qref, qmeta):
    """xv and icl in one batch: forced codes and the free runs' lengths and frames."""
    handles = qrt.submit_many([request_of(qmeta, qref, k, **GREEDY, max_frames=N, min_frames=N) for k in ("xv", "icl")]
                              + [request_of(qmeta, qref, k, **GREEDY, max_frames=FREE) for k in ("xv", "icl")])
    results = [h.result() for h in handles]
    for b in range(2):
        np.testing.assert_array_equal(results[b].codes, qref["batch_gen_codes"][b])
        length = int(qref["batch_free_lengths"][b])
        np.testing.assert_array_equal(results[2 + b].codes, qref["batch_free_codes_raw"][b, :length])
    assert [len(r.codes) for r in results[2:]] == qref["batch_free_lengths"].tolist()


def test_codec_reference_streamed(qrt, qcodec_ref):
    """The family's codec executor, chunk by chunk in one slot, gives the codec reference's waveform; the
    batch of two with its lengths gives the batched decode."""
    codec = qrt.family.codec
    ex = CodecExecutor(codec, num_slots=2, batch_buckets=[1, 2], frame_buckets=[1, 2, 4, 8], graphs=False)
    codes = [tuple(int(c) for c in row) for row in qcodec_ref["codes"]]
    ex.admit(0)
    out, start = [], 0
    for n in (1, 3, 4, 8):
        plan = ChunkPlan(0, tuple(codes[start : start + n]), False)
        host = ex.launch(ex.pack([plan], 1, 8 if n > 4 else 4)).numpy()
        out.append(ex.read(host, [plan]).audio(0)[0])
        start += n
    close(np.concatenate(out), qcodec_ref["wav"])
    lengths = qcodec_ref["batch_lengths"].tolist()
    ex.admit(0), ex.admit(1)
    plans = [ChunkPlan(i, tuple(tuple(int(c) for c in r) for r in qcodec_ref["batch_codes"][i][:lengths[i]][:8]), False)
             for i in range(2)]
    host = ex.launch(ex.pack(plans, 2, 8)).numpy()
    batch = ex.read(host, plans)
    for i in range(2):
        close(batch.audio(i)[0], qcodec_ref["batch_wav"][i][: len(plans[i].codes) * codec.hop])
