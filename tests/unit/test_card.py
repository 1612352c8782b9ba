"""Cards: both shipped cards validate; a bad card is refused with the field named."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from v2.card import CARDS_DIR, CardError, build_model, load_card

TINY = (CARDS_DIR / "moss_tts_local_tiny.toml").read_text()


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "card.toml"
    p.write_text(text)
    return p


def test_shipped_cards_validate():
    tiny = load_card("moss_tts_local_tiny")
    real = load_card("moss_tts_local_v1_5")
    assert tiny.model.seeded is not None and tiny.model.tokenizer == "bytes"
    assert real.model.checkpoint and real.model.dtype == "bfloat16" and real.model.seeded is None
    assert real.limits.max_frames == 4096
    assert real.sampling.settings().audio.temperature == 1.7


def test_tiny_card_loads_fast_and_is_deterministic():
    card = load_card()
    start = time.perf_counter()
    a = build_model(card)
    assert time.perf_counter() - start < 2.0
    b = build_model(card)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert x.equal(y), name


@pytest.mark.parametrize("old,new,field", [
    ('class = "MossTTSLocal"', 'class = "os.system"', "model.class"),
    ('top_k = 25\n', '', "sampling.audio.top_k"),
    ('max_frames = 600 ', 'max_frames = 0 ', "limits.max_frames"),
    ('dtype = "float32"', 'dtype = "float64"', "model.dtype"),
    ('[limits]', '[limits]\nsurprise = 1', "limits.surprise"),
    ('top_p = 0.8', 'top_p = 1.5', "sampling.audio.top_p"),
    ('checkpoint = ""', 'checkpoint = "somewhere"', "model"),
])
def test_bad_card_is_refused_naming_the_field(tmp_path, old, new, field):
    assert old in TINY
    with pytest.raises(CardError, match=field.replace(".", r"\.")):
        load_card(write(tmp_path, TINY.replace(old, new, 1)))


def test_unknown_card_lists_the_known_ones(tmp_path):
    with pytest.raises(CardError, match="moss_tts_local_tiny"):
        load_card("no_such_card")
    with pytest.raises(CardError, match="not valid TOML"):
        load_card(write(tmp_path, "name = "))
