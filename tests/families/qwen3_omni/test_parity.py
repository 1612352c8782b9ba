"""The whole cascade through `Runtime.from_card(qwen3_omni_30b_a3b_instruct, checkpoint=<fixture>)`: every prompt's
thinker ids, codes (exact) and waveform (within the README's 1e-4) against the references, alone and submitted
together; `modalities: ["text"]` runs the thinker alone (the capped text exact); text deltas stream."""

from __future__ import annotations

import numpy as np
import pytest

from tests.families.qwen3_omni.conftest import request
from v2.events import TextDelta
from v2.runtime import Runtime
from v2.runtime.handles import SpeechResult

pytestmark = pytest.mark.exact
KEYS = ("a", "b", "c", "d")
EOS = 151645


def check(ref: dict[str, np.ndarray], meta: dict, key: str, r: SpeechResult) -> None:
    assert r.error is None, r.error
    tokens = [int(t) for t in ref[f"{key}_thinker_tokens"]]
    want = tokens[:-1] if tokens[-1] == EOS else tokens[: meta["thinker_cap"] - 1]
    assert r.text_ids == tuple(want)
    assert r.text_finish_reason == ("stop" if tokens[-1] == EOS else "length")
    np.testing.assert_array_equal(r.codes, ref[f"{key}_codes"])
    wav = ref[f"{key}_wav_generate"]
    assert r.audio.shape == (1, wav.shape[0])
    np.testing.assert_allclose(r.audio[0], wav, atol=1e-4, rtol=1e-4)
    assert r.finish_reason == ("stop" if len(ref[f"{key}_talker_codes0_chosen"]) == len(r.codes) + 1
                               and ref[f"{key}_talker_codes0_chosen"][-1] == 2150 else "length")


@pytest.mark.parametrize("key", KEYS)
def test_alone(rt: Runtime, fixture: tuple[dict, dict], key: str) -> None:
    ref, meta = fixture
    check(ref, meta, key, rt.submit(request(ref, meta, key)).result())


def test_together(rt: Runtime, fixture: tuple[dict, dict]) -> None:
    ref, meta = fixture
    handles = [rt.submit(request(ref, meta, k)) for k in KEYS]
    for key, h in zip(KEYS, handles):
        check(ref, meta, key, h.result())


def test_text_only_runs_the_thinker_alone(rt: Runtime, fixture: tuple[dict, dict]) -> None:
    ref, meta = fixture
    for key in KEYS:
        r = rt.submit(request(ref, meta, key, modalities=["text"], speaker=None,
                              max_tokens=meta["thinker_cap"])).result()
        tokens = tuple(int(t) for t in ref[f"{key}_thinker_tokens"] if t != EOS)
        assert r.text_ids == tokens and r.codes.shape == (0, 16) and r.audio.shape[1] == 0


def test_text_deltas_stream_as_thinker_events(rt: Runtime, fixture: tuple[dict, dict]) -> None:
    ref, meta = fixture
    h = rt.submit(request(ref, meta, "b", stream=True))
    r = h.result()
    deltas = [e.item for e in h.events() if e.loop == "thinker"]
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert tuple(i for d in deltas for i in d.ids) == r.text_ids
