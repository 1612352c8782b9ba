"""Qwen3-ForcedAligner checkpoint loading by the release's key names (`thinker.*`).

Owns: mapping the release keys onto `ForcedAligner` (everything under `thinker.`; the decoder's q/k/v and
gate/up fused as `qwen3.release_layout` says), the strict key check (one error listing every missing,
unexpected and mis-shaped key) and reading each tensor once into the compute dtype. The file handling is
weights.py's.
Must not know: words, tokenizers, requests, the runtime, cards.
"""

from __future__ import annotations

from pathlib import Path

import torch

from v2.models.forced_aligner.config import ForcedAlignerConfig
from v2.models.forced_aligner.model import ForcedAligner
from v2.models.qwen3 import release_layout
from v2.models.weights import (
    empty_model, fill_from_files, raise_mismatch, read_config, stored_shapes, weight_files,
)

PREFIX = "thinker."


def load_aligner(path: Path, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> ForcedAligner:
    """The release directory `path` (config.json + safetensors) -> the model in `dtype` on `device`, eval mode."""
    model = empty_model(ForcedAligner, ForcedAlignerConfig.from_dict(read_config(path)))
    layout = {PREFIX + k: v for k, v in release_layout(model).items()}
    files = weight_files(path)
    stored = stored_shapes(files)
    misshaped = [f"{k}: checkpoint {list(s)} vs model {list(layout[k].shape)}"
                 for k, s in sorted(stored.items()) if k in layout and tuple(s) != layout[k].shape]
    raise_mismatch(sorted(set(layout) - set(stored)), sorted(set(stored) - set(layout)), misshaped)
    fill_from_files(model, layout, files, dtype=dtype, device=device)
    return model.eval()

