"""Properties of the Qwen3-TTS family through the runtime (tiny fixture checkpoint, CPU): batched == alone
across modes and next to MOSS-TTS-Local requests in the same process, streamed == whole (the in-context
clone's reference as decoder context), cached == uncached, preempted == alone, a shared prompt == each
alone, nothing leaks (finish, cancel, timeout, failure, encode), and bad input refused naming the field."""

from __future__ import annotations

import threading
import time
import tomllib

import numpy as np
import pytest
import torch

from v2.card import card_path
from v2.families.qwen3_tts.card import Qwen3Card
from v2.errors import RequestError

from .conftest import CHECKPOINT, KEYS, request_of, wait_idle

pytestmark = pytest.mark.exact

ROLLOUT = {"profile": "rollout"}


def tiny_card(**talker) -> Qwen3Card:
    data = tomllib.loads(card_path("qwen3_tts_tiny").read_text())
    data["loops"]["talker"].update(talker)
    return Qwen3Card.model_validate(data)


def same(a, b, atol: float = 5e-5) -> None:
    """Equal codes; logprobs within `atol` (a batch's size changes a matmul's rounding)."""
    np.testing.assert_array_equal(a.codes, b.codes)
    if a.trajectory is not None:
        np.testing.assert_allclose(a.trajectory.logprobs, b.trajectory.logprobs, atol=atol, rtol=0)


@pytest.fixture(scope="module")
def sampled(qrt, qref, qmeta):
    """One sampled request per mode (release defaults from generation_config.json), each run alone."""
    reqs = [request_of(qmeta, qref, k, seed=11 + i, max_frames=6, **ROLLOUT) for i, k in enumerate(KEYS)]
    return reqs, [qrt.submit(r).result() for r in reqs]


def test_batched_equals_alone_across_modes(qrt, sampled):
    reqs, alone = sampled
    together = [h.result() for h in qrt.submit_many(reqs)]
    for a, b in zip(together, alone):
        assert a.finish_reason == b.finish_reason and a.error is None
        same(a, b)
    assert qrt.stats()["kinds"]["ar_frame"]["mean_batch"] > 1


def test_batched_equals_alone_next_to_moss(qrt, sampled):
    """A MOSS-TTS-Local runtime in the same process, its requests running while these run."""
    from v2.runtime import Runtime

    reqs, alone = sampled
    with Runtime.from_card("moss_tts_local_tiny", device="cpu") as moss:
        moss_reqs = [{"text": f"Hello number {i}.", "seed": i, "max_frames": 8} for i in range(3)]
        moss_alone = [moss.submit(r).result() for r in moss_reqs]
        moss_handles = moss.submit_many(moss_reqs)
        handles = qrt.submit_many(reqs[:3])
        for h, b in zip(handles, alone[:3]):
            same(h.result(), b)
        for h, b in zip(moss_handles, moss_alone):
            np.testing.assert_array_equal(h.result().codes, b.codes)


@pytest.mark.parametrize("key", ["cvd", "icl"])
def test_streamed_equals_whole(qrt, qref, qmeta, key):
    fam = qrt.family
    handle = qrt.submit(request_of(qmeta, qref, key, seed=3, max_frames=10, min_frames=10, stream=True))
    chunks = [c.audio for c in handle]
    result = handle.result()
    streamed = np.concatenate(chunks, axis=1)
    assert len(chunks) > 1 and np.array_equal(streamed, result.audio)
    codes = torch.from_numpy(result.codes)
    if key == "icl":  # the public API: reference codes prepended, their samples cut
        ref = fam.encoder.encode([torch.from_numpy(qref["spk_ref_wav"])])[0]
        whole = fam.codec.decode(torch.cat([ref, codes])[None])[0, len(ref) * fam.codec.hop:]
    else:
        whole = fam.codec.decode(codes[None])[0]
    assert torch.equal(torch.from_numpy(result.audio[0]), whole)


def test_cached_equals_uncached(qrt, qref, qmeta):
    req = request_of(qmeta, qref, "vd", seed=5, max_frames=6, **ROLLOUT)
    before = qrt.stats()["prefix_cache_hits"]
    first = qrt.submit(req).result()
    second = qrt.submit(req).result()
    assert qrt.stats()["prefix_cache_hits"] > before  # the second found the first's full prompt blocks
    same(first, second)


def test_shared_prompt_equals_alone(qrt, qref, qmeta):
    reqs = [request_of(qmeta, qref, "cv", seed=s, max_frames=6, **ROLLOUT) for s in (1, 2, 3)]
    alone = [qrt.submit(r).result() for r in reqs]
    shared = [h.result() for h in qrt.submit_many(reqs, share_prompt=True)]
    for a, b in zip(shared, alone):
        same(a, b)
    with pytest.raises(RequestError, match="^reference_audio"):
        qrt.submit_many([request_of(qmeta, qref, "xv")] * 2, share_prompt=True)


def test_preempted_equals_alone(qref, qmeta):
    """A KV pool of 8 blocks of 16 rows: three requests of 25-33 prompt rows and 24 frames take turns."""
    from v2.runtime import Runtime

    card = tiny_card(max_prompt_rows=48, max_frames=24, kv_blocks=8)
    with Runtime.from_card(card, checkpoint=str(CHECKPOINT), device="cpu") as rt:
        reqs = [request_of(qmeta, qref, k, seed=7, max_frames=24, min_frames=24, **ROLLOUT) for k in ("cv", "cvd", "vd")]
        together = [h.result() for h in rt.submit_many(reqs)]
        assert rt.stats()["kv_preemptions"] > 0
        for r, t in zip(reqs, together):  # recomputed KV (a prefill of the frames' rows) rounds otherwise:
            same(t, rt.submit(r).result(), atol=5e-3)  # a top-k boundary may move a logprob by ~1e-3
        wait_idle(rt)


def test_nothing_leaks(qrt, qref, qmeta, monkeypatch):
    """Finish, cancel (running, waiting, encoding), timeout and a failing loop all give every slot, block
    and encode back."""
    real = qrt.family.talker_loop.advance
    doomed: set[int] = set()
    # the request submitted after `known` is filled: its first frame takes longer than its timeout, so it cannot
    # stop before it however fast the host is (marked before it is submitted: a frame step can run before
    # `submit` returns)
    known: set[int] = set()
    slept: set[int] = set()
    paced: set[int] = set()  # the streamed request: 10 ms a frame at least, so its cancel comes while it runs

    def advance(state, plan, row):
        if state.request_id in doomed:
            raise RuntimeError("injected")
        if state.request_id in paced:
            time.sleep(0.01)
        if known and state.request_id not in known and state.request_id not in slept:
            slept.add(state.request_id)
            time.sleep(0.4)
        return real(state, plan, row)

    monkeypatch.setattr(qrt.family.talker_loop, "advance", advance)
    started = threading.Event()
    streaming = qrt.submit(request_of(qmeta, qref, "cv", max_frames=60, min_frames=60, stream=True))
    paced.add(streaming.request_id)
    streaming.subscribe(lambda chunk: started.set())
    failing = qrt.submit(request_of(qmeta, qref, "vd", max_frames=30, min_frames=30))
    doomed.add(failing.request_id)
    encoding = qrt.submit(request_of(qmeta, qref, "icl", max_frames=30))
    encoding.cancel()
    known.update(h.request_id for h in (streaming, failing, encoding))
    late = qrt.submit(request_of(qmeta, qref, "cvd", max_frames=60, min_frames=60, timeout=0.3))
    assert started.wait(30)
    streaming.cancel()
    results = [h.result() for h in (streaming, failing, encoding, late)]
    assert [r.finish_reason for r in results] == ["abort", "error", "abort", "abort"]
    assert "injected" in results[1].error and "timeout" in results[3].error
    wait_idle(qrt)


BAD = [
    ({"text_ids": [5], "speaker": "nobody"}, "speaker"),
    ({"text_ids": [5], "speaker": "vivian", "language": "klingon"}, "language"),
    ({"text": "hello"}, "text"),  # the fixture checkpoint ships no tokenizer files
    ({"text_ids": [5], "text": "hi"}, "text"),
    ({"text_ids": []}, "text_ids"),
    ({"text_ids": [10**9]}, "text_ids"),
    ({"text_ids": [5], "instruction_ids": [10**9]}, "instruction_ids"),
    ({"text_ids": [5], "reference_audio": (np.zeros(24000, np.float32), 24000), "instruction_ids": [5]}, "instruction_ids"),
    ({"text_ids": [5], "reference_audio": (np.zeros(24000, np.float32), 24000), "speaker": "vivian"}, "speaker"),
    ({"text_ids": [5], "reference_audio": (np.zeros(24000, np.float32), 24000)}, "reference_text"),
    ({"text_ids": [5], "reference_audio": b"not audio", "x_vector_only": True}, "reference_audio"),
    ({"text_ids": [5], "reference_text_ids": [5]}, "reference_text_ids"),
    ({"text_ids": [5], "x_vector_only": True}, "x_vector_only"),
    ({"text_ids": [5], "text_feed": "sometimes"}, "text_feed"),
    ({"text_ids": [5], "max_frames": 10**6}, "max_frames"),
    ({"text_ids": [5], "max_frames": 3, "min_frames": 4}, "min_frames"),
    ({"text_ids": [5], "temperature": -1.0}, "temperature"),
    ({"text_ids": [5], "subtalker_top_p": 0.0}, "subtalker_top_p"),
    ({"text_ids": [5], "repetition_penalty": 0.0}, "repetition_penalty"),
    ({"text_ids": [5], "sampling": {"stop": {"temperature": 1.0}}}, "sampling"),  # no separate stop head
    ({"text_ids": [5] * 2000}, "text"),
]


@pytest.mark.parametrize("fields, name", BAD)
def test_bad_request_names_the_field(qrt, fields, name):
    with pytest.raises(RequestError) as e:
        qrt.submit(fields)
    assert str(e.value).startswith(f"{name}: ") or str(e.value).startswith(f"{name}."), str(e.value)


def test_checkpoint_rules(qrt):
    """Mode rules from the checkpoint's config: a CustomVoice checkpoint needs a speaker; one without a speaker
    encoder refuses reference audio; a 0.6B custom voice refuses an instruction (the reference API drops it)."""
    from dataclasses import replace

    from v2.families.qwen3_tts.prepare import prepare
    from v2.families.qwen3_tts.request import parse

    fam = qrt.family
    cv = replace(fam.cfg, model_type="custom_voice", speaker_encoder=None)
    with pytest.raises(RequestError, match="^speaker: "):
        prepare(parse({"text_ids": [5]}), fam.card, cv, None, fam.defaults, fam.codec_spec)
    with pytest.raises(RequestError, match="^reference_audio: "):
        prepare(parse({"text_ids": [5], "reference_audio": (np.zeros(24000, np.float32), 24000), "x_vector_only": True}),
                fam.card, cv, None, fam.defaults, fam.codec_spec)
    req = parse({"text_ids": [5, 6], "speaker": "vivian", "instruction_ids": [7, 8, 9]})
    big = prepare(req, fam.card, cv, None, fam.defaults, fam.codec_spec)
    with pytest.raises(RequestError, match="^instruction_ids: the 0.6B CustomVoice"):  # refused, never dropped
        prepare(req, fam.card, replace(cv, model_size="0b6"), None, fam.defaults, fam.codec_spec)
    small = prepare(parse({"text_ids": [5, 6], "speaker": "vivian"}), fam.card, replace(cv, model_size="0b6"), None,
                    fam.defaults, fam.codec_spec)
    assert len(big.rows) - len(small.rows) == 3 + 5  # the instruction's ids and its template (im_start user \n ... im_end \n)
