"""Qwen3-TTS checkpoint loading and seeded initialisation.

Owns: mapping the release's key names onto the module tree (q/k/v and gate/up fused per decoder, each
decoder with its own sizes), the strict key check (speaker-encoder keys exactly when the config is a
"base" model; no tied aliases: the release's heads are separate tensors), reading each tensor once into
the compute dtype, and the seeded weights of an embedded tiny model. The file handling is weights.py's.
Must not know: the runtime, cards, requests, prompts.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from v2.models.qwen3 import Part, release_layout
from v2.models.qwen3_tts.config import Qwen3TTSConfig
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.weights import (
    empty_model, fill_from_files, raise_mismatch, read_config, set_tensor, stored_shapes, weight_files,
)


def check_keys(layout: dict[str, Part], stored: dict[str, tuple[int, ...]]) -> None:
    """Raise one CheckpointError listing every missing, unexpected and mis-shaped key."""
    misshaped = [f"{k}: checkpoint {list(s)} vs model {list(layout[k].shape)}"
                 for k, s in sorted(stored.items()) if k in layout and tuple(s) != layout[k].shape]
    raise_mismatch(sorted(set(layout) - set(stored)), sorted(set(stored) - set(layout)), misshaped)


def load_checkpoint(path: Path, *, dtype: torch.dtype, device: torch.device | str) -> Qwen3TTS:
    """Build the model on the meta device and fill it tensor by tensor from safetensors (bf16 or any
    stored dtype -> `dtype`)."""
    model = empty_model(Qwen3TTS, Qwen3TTSConfig.from_dict(read_config(path)))
    layout = release_layout(model)
    files = weight_files(path)
    check_keys(layout, stored_shapes(files))
    fill_from_files(model, layout, files, dtype=dtype, device=device)
    return model.eval()


def fill_seeded(model: nn.Module, seed: int, *, gain: float, device: torch.device | str = "cpu") -> None:
    """Every parameter drawn from `seed` on `device`, in name order: weights of 2 or more dims (matrices,
    tables, convolutions) ~ N(0, gain / sqrt(fan_in)), biases ~ N(0, 0.02), norm scales ~ 1 + N(0, 0.02)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        shape = tuple(p.shape)
        value = torch.randn(shape, generator=gen, device=device)
        if len(shape) >= 2:
            value *= gain / math.prod(shape[1:]) ** 0.5
        elif name.endswith("bias"):
            value *= 0.02
        else:
            value = value.mul_(0.02).add_(1.0)
        set_tensor(model, name, value)


def init_seeded(config: dict, seed: int, *, dtype: torch.dtype, device: torch.device | str,
                init_device: torch.device | str = "cpu") -> Qwen3TTS:
    """The model of `config` (release schema) with weights drawn from `seed` (identical on every machine
    for a given `init_device` type; CPU: everywhere)."""
    model = empty_model(Qwen3TTS, Qwen3TTSConfig.from_dict(config))
    fill_seeded(model, seed, gain=0.5, device=init_device)
    return model.to(device=device, dtype=dtype).eval()
