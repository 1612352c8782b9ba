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
    empty_model, open_weights, raise_mismatch, read_config, read_tensor, set_tensor,
    stored_by_file, stored_shapes, weight_files,
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
    for name, p in list(model.named_parameters()):  # one allocation per parameter, filled below
        set_tensor(model, name, torch.empty(p.shape, dtype=dtype, device=device))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for file, keys in stored_by_file(files):
            with open_weights(file) as f:
                for key in keys:
                    part = layout[key]
                    params[part.param][part.start : part.start + part.shape[0]] = read_tensor(f, key, file)
    return model.eval()

