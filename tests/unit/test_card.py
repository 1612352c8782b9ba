"""Cards: both shipped cards validate; a bad card is refused with the field named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from v2.card import CARDS_DIR, CardError, build_codec, build_model, load_card

TINY = (CARDS_DIR / "moss_tts_local_tiny.toml").read_text()


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "card.toml"
    p.write_text(text)
    return p


def test_shipped_cards_validate():
    tiny = load_card("moss_tts_local_tiny")
    real = load_card("moss_tts_local_v1_5")
    assert tiny.experts.backbone.checkpoint == "seed:tts" and tiny.experts.backbone.tokenizer == "bytes"
    assert set(tiny.seeded) == {"tts", "codec"}
    assert real.experts.backbone.checkpoint == real.experts.local_transformer.checkpoint
    assert real.experts.backbone.dtype == "bfloat16" and not real.seeded
    assert real.loops.ar_decode.max_frames == 4096
    assert real.loops.ar_decode.sampling.settings().audio.temperature == 1.7
    assert (real.loops.vocoder.first_chunk_frames, real.loops.vocoder.chunk_frames) == (3, 25)


def test_tiny_card_loads_and_is_deterministic():
    card = load_card()
    a, codec = build_model(card), build_codec(card)
    b = build_model(card)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert x.equal(y), name
    assert codec.sample_rate == 48000 and codec.cfg.hop == 3840


@pytest.mark.parametrize("old,new,field", [
    ('class = "Qwen3Backbone"', 'class = "os.system"', "experts.backbone.class"),
    ('class = "VocoderLoop"', 'class = "MyLoop"', "loops.vocoder.class"),
    ('top_k = 25\n', '', "loops.ar_decode.sampling.audio.top_k"),
    ('max_frames = 600 ', 'max_frames = 0 ', "loops.ar_decode.max_frames"),
    ('dtype = "float32"', 'dtype = "float64"', "experts.backbone.dtype"),
    ('[loops.vocoder]', '[loops.vocoder]\nsurprise = 1', "loops.vocoder.surprise"),
    ('top_p = 0.8', 'top_p = 1.5', "loops.ar_decode.sampling.audio.top_p"),
    ('checkpoint = "seed:codec"', 'checkpoint = "seed:nothing"', "experts.vocoder.checkpoint"),
    ('checkpoint = "seed:tts"        #', 'checkpoint = "elsewhere"        #', "experts.local_transformer"),
    ('frame_buckets = [1, 2, 3, 4, 6, 8, 12, 16, 24, 25]', 'frame_buckets = [1, 2, 4]', "chunk frames"),
    ('batch_buckets = [1, 2, 4, 8, 16, 32, 64]\n\n[loops.ar_decode.sampling]',
     'batch_buckets = [4, 2]\n\n[loops.ar_decode.sampling]', "loops.ar_decode.batch_buckets"),
    ('kv_blocks = 4096 ', 'kv_blocks = 101 ', "kv_blocks (101) cannot hold one request at full length"),
    ('kv_blocks = 4096 ', 'kv_blocks = 4096\nkv_memory_fraction = 0.5 ', "give one KV budget, not both"),
    ('block_size = 16 ', 'block_size = 0 ', "loops.ar_decode.block_size"),
])
def test_bad_card_is_refused_naming_the_field(tmp_path, old, new, field):
    assert old in TINY
    with pytest.raises(CardError, match=re.escape(field)):
        load_card(write(tmp_path, TINY.replace(old, new, 1)))


def test_missing_section_is_named(tmp_path):
    start = TINY.index("[experts.vocoder]")
    end = TINY.index("[loops.ar_decode]")
    with pytest.raises(CardError, match=r"experts\.vocoder"):
        load_card(write(tmp_path, TINY[:start] + TINY[end:]))


def test_unknown_card_lists_the_known_ones(tmp_path):
    with pytest.raises(CardError, match="moss_tts_local_tiny"):
        load_card("no_such_card")
    with pytest.raises(CardError, match="not valid TOML"):
        load_card(write(tmp_path, "name = "))
