"""Paths, configs and fixtures shared by the Qwen3 codec tests: the tiny checkpoint's decoder and encoder, its
reference arrays, and a seeded codec of other dimensions. A module of its own (not a conftest.py, which
would shadow tests/conftest.py for `from conftest import ...`): test files import the fixtures by name."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

QWEN_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "qwen3_tts_tiny"
TOKENIZER_DIR = QWEN_DIR / "checkpoint" / "speech_tokenizer"


def seeded_config() -> dict:
    """The fixture's config.json with other structural numbers: 3 layers, 4 query / 2 KV heads of 8, a
    window of 40 frames (a receptive field beyond the reference's 25-frame left context), ratios [2] and
    rates [4, 3] (hop 24), 8 code groups of 64 codes, decoder_dim 16."""
    cfg = json.loads((TOKENIZER_DIR / "config.json").read_text())
    d = cfg["decoder_config"]
    d.update(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=8, hidden_size=24,
             intermediate_size=40, sliding_window=40, upsampling_ratios=[2], upsample_rates=[4, 3],
             decoder_dim=16, latent_dim=12, codebook_dim=10, codebook_size=64, num_quantizers=8)
    cfg.update(decode_upsample_rate=24, encode_downsample_rate=24, encoder_valid_num_quantizers=8,
               input_sample_rate=600, output_sample_rate=600)
    cfg["encoder_config"] = None
    return copy.deepcopy(cfg)


@pytest.fixture(scope="session")
def qref() -> dict[str, np.ndarray]:
    with np.load(QWEN_DIR / "codec_reference.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="session")
def qdecoder():
    from v2.models.qwen3_codec import Qwen3CodecDecoder

    return Qwen3CodecDecoder.from_pretrained(TOKENIZER_DIR)


@pytest.fixture(scope="session")
def qencoder():
    from v2.models.qwen3_codec import Qwen3CodecEncoder

    return Qwen3CodecEncoder.from_pretrained(TOKENIZER_DIR)


@pytest.fixture(scope="session")
def seeded_decoder():
    from v2.models.qwen3_codec import Qwen3CodecDecoder

    return Qwen3CodecDecoder.from_seed(seeded_config(), seed=7)
