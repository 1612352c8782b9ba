"""Fixtures of the Mimi tests: the tiny CSM checkpoint's codec (`codec_model.*`, `codec_config`), its reference
arrays, and a seeded Mimi of other dimensions (ratios, widths, GQA heads, grouped up-sampler, 8 codebooks of 64
codes with 2 semantic, a 5-step window that chunks soon cross)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import torch

CSM_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "csm_tiny"
CHECKPOINT = CSM_DIR / "checkpoint"
TOL = dict(atol=1e-4, rtol=1e-4)


def codec_config() -> dict:
    return copy.deepcopy(json.loads((CHECKPOINT / "config.json").read_text())["codec_config"])


def other_config() -> dict:
    """Every size other than the fixture's: hop 2 x 4 x 3 x 2 = 48 at 600 Hz (12.5 Hz frames), 3 transformer
    layers of 4 query / 2 KV heads of 6, window 5 steps, 2 residual layers per stage, upsample groups 12 of 24."""
    cfg = codec_config()
    cfg.update(sampling_rate=600, upsampling_ratios=[4, 3, 2], hidden_size=24, num_filters=4, num_hidden_layers=3,
               num_attention_heads=4, num_key_value_heads=2, head_dim=6, intermediate_size=40, sliding_window=5,
               num_residual_layers=2, kernel_size=5, last_kernel_size=5, num_quantizers=8, num_semantic_quantizers=2,
               codebook_size=64, codebook_dim=10, vector_quantization_hidden_dimension=10, upsample_groups=12)
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 500.0}
    return cfg


@pytest.fixture(scope="session")
def mref() -> dict[str, np.ndarray]:
    with np.load(CSM_DIR / "codec_reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def mimi():
    from v2.models.mimi import MimiModel

    return MimiModel.from_pretrained(CHECKPOINT, prefix="codec_model.", config_key="codec_config")


@pytest.fixture(scope="session")
def other():
    from v2.models.mimi import MimiModel

    return MimiModel.from_seed(other_config(), seed=5)


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Small ops run several times faster on one intra-op thread on a shared CPU."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def random_codes(model, frames: int, seed: int, batch: int = 1) -> torch.Tensor:
    """[batch, frames, Q] codes drawn from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.cfg.codebook_size, (batch, frames, model.cfg.num_quantizers), generator=gen)
