"""`Runtime.align`, a service in itself: the fixture's references reproduced through a runtime that added the
aligner from the fixture's checkpoint directory (classes, fixed times and word times exact, alone and batched,
`word_ids` bypassing the tokenizer); text split by the release's rule; Japanese through nagisa; refusals naming
the field (an unlisted language, no aligner, `timestamps` without one, an aligner card loaded as a speech card)."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest
import torch

from tests.models.forced_aligner.conftest import CASES, CHECKPOINT, FA_DIR
from v2.card import CardError, known_cards, load_card
from v2.errors import RequestError
from v2.events import WordTime
from v2.runtime import Runtime

# the `exact` mark is on the reproduced references and batched == each alone only: refusals, word splitting
# and a missing aligner hold or fail alike on every CPU path, so .ci/run's forced-path legs skip them


@pytest.fixture(scope="module")
def rt() -> Iterator[Runtime]:
    if not (FA_DIR / "reference.npz").is_file():
        pytest.fail(f"the forced-aligner tiny fixture is not at {FA_DIR}")
    with Runtime.from_card("qwen3_tts_tiny", device="cpu", aligner=str(CHECKPOINT)) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def ref() -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    import json

    with np.load(FA_DIR / "reference.npz") as data:
        arrays = {k: data[k] for k in data.files}
    return arrays, json.loads((FA_DIR / "meta.json").read_text())


def expected(meta: dict[str, Any], case: str) -> list[WordTime]:
    return [WordTime(t["word"], t["start"], t["end"]) for t in meta["cases"][case]["timestamps"]]


@pytest.mark.exact
@pytest.mark.parametrize("case", CASES)
def test_align_reproduces_each_reference(rt: Runtime, ref: Any, case: str) -> None:
    arrays, meta = ref
    c = meta["cases"][case]
    wave = arrays[f"{case}/wave"]
    assert rt.has_aligner
    assert rt.align(wave, 16000, words=c["words"], word_ids=c["word_ids"]) == expected(meta, case)
    # the text split by the release's rule gives the fixture's words; the ids still bypass the tokenizer
    assert rt.align(torch.from_numpy(wave), 16000, c["text"], word_ids=c["word_ids"]) == expected(meta, case)


@pytest.mark.exact
def test_batched_equals_each_reference(rt: Runtime, ref: Any) -> None:
    arrays, meta = ref
    aligner = rt.engine.family.built["aligner"].aligner  # type: ignore[attr-defined]
    clips = [aligner.clip(arrays[f"{c}/wave"], 16000, words=meta["cases"][c]["words"],
                          word_ids=meta["cases"][c]["word_ids"]) for c in CASES]
    for order in (list(range(len(CASES))), list(reversed(range(len(CASES))))):
        got = aligner.align_clips([clips[i] for i in order])
        for i, alignment in zip(order, got):
            c = meta["cases"][CASES[i]]
            assert alignment.classes == c["classes"] and alignment.fixed_ms == c["fixed_ms"]
            assert alignment.words == expected(meta, CASES[i])


def test_refusals_name_the_field(rt: Runtime, ref: Any) -> None:
    arrays, meta = ref
    wave = arrays["en_short/wave"]
    with pytest.raises(ValueError, match="language: 'Klingon' is not one the aligner lists"):
        rt.align(wave, 16000, "Hello", word_ids=[[1]], language="Klingon")
    with pytest.raises(ValueError, match="text: the aligner's checkpoint .* has no tokenizer"):
        rt.align(wave, 16000, "Hello world")  # the fixture ships no tokenizer: ids are needed
    with pytest.raises(ValueError, match="audio: expected samples"):
        rt.align(np.zeros((2, 2, 5), np.float32), 16000, words=["a"], word_ids=[[1]])
    with pytest.raises(ValueError, match="sample_rate: a positive whole number"):
        rt.align(wave, 0, words=["a"], word_ids=[[1]])
    with pytest.raises(ValueError, match="word_ids: 1 entries for 2 words"):
        rt.align(wave, 16000, words=["a", "b"], word_ids=[[1]])


def test_resampled_and_japanese_on_the_seeded_card() -> None:
    with Runtime.from_card("csm_tiny", device="cpu", aligner="forced_aligner_tiny") as rt:
        wave = np.random.default_rng(0).standard_normal(24000).astype(np.float32) * 0.1
        words = rt.align(wave, 24000, "Hello, world! It's a test.")
        assert [w.word for w in words] == ["Hello", "world", "It's", "a", "test"]
        assert rt.align(np.stack([wave, wave]), 24000, "Hello, world! It's a test.") == words  # mono: the mean
        ja = rt.align(wave, 24000, "東京に行きます。", language="Japanese")
        assert "".join(w.word for w in ja) == "東京に行きます" and len(ja) > 1  # nagisa's words
        assert all(a.start <= a.end <= b.start for a, b in zip(ja, ja[1:]))


def test_korean_without_the_release_word_list_is_refused_naming_it(rt: Runtime, ref: Any) -> None:
    from v2.models.forced_aligner.words import find_korean_dict

    if find_korean_dict() is not None:
        pytest.skip("the release's Korean word list is installed here")
    with pytest.raises(ValueError, match="language: 'Korean' needs the release's word list korean_dict_jieba.dict"):
        rt.align(ref[0]["en_short/wave"], 16000, "안녕하세요 세계", word_ids=[[1], [2]], language="Korean")


def test_without_an_aligner_timestamps_and_align_are_refused() -> None:
    with Runtime.from_card("qwen3_tts_tiny", device="cpu") as rt:
        assert not rt.has_aligner
        with pytest.raises(RequestError, match="timestamps: this runtime has no aligner") as err:
            rt.submit({"text": "Hi.", "timestamps": "word"})
        assert err.value.field == "timestamps"
        with pytest.raises(RuntimeError, match="align: this runtime has no aligner"):
            rt.align(np.zeros(16000, np.float32), 16000, "Hi")
        with pytest.raises(RequestError, match="timestamps"):
            rt.submit({"text": "Hi.", "timestamps": "char"})
        assert rt.submit({"text": "Hi.", "max_frames": 3}).result(300).words == ()


def test_timestamps_need_the_audio() -> None:
    with Runtime.from_card("qwen3_tts_tiny", device="cpu", aligner="forced_aligner_tiny") as rt:
        with pytest.raises(RequestError, match="timestamps: word times are read from the audio") as err:
            rt.submit({"text": "Hi.", "timestamps": "word", "decode_audio": False})
        assert err.value.field == "timestamps"


def test_aligner_cards_are_not_speech_cards() -> None:
    assert "forced_aligner_tiny" not in known_cards() and "forced_aligner_0_6b" not in known_cards()
    with pytest.raises(CardError, match="kind 'aligner', not a speech card"):
        load_card("forced_aligner_tiny")
    with pytest.raises(CardError, match="aligner: the card 'csm_tiny' is a speech card"):
        Runtime.from_card("csm_tiny", device="cpu", aligner="csm_tiny")
    with pytest.raises(CardError, match="add_loops already adds a loop named 'aligner'"):
        Runtime.from_card("csm_tiny", device="cpu", aligner="forced_aligner_tiny", add_loops=["aligner"])
