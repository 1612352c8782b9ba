"""CSM checkpoint loading and seeded initialisation.

Owns: mapping the release's key names onto the module tree (q/k/v and gate/up fused per decoder, each
decoder with its own sizes), the strict key check (one error lists every missing, unexpected and
mis-shaped key; the codec's `codec_model.*` keys are the codec loader's and are skipped here), the two
audio tables (`backbone_model.embed_tokens.embed_audio_tokens`, `depth_decoder.model.embed_tokens`: both
are stored and loaded as they are; with `tie_codebooks_embeddings` a checkpoint holding only one fills
both from it), reading each tensor once into the compute dtype, and seeded weights for a model built
from a config alone. The file handling is weights.py's.
Must not know: the runtime, cards, requests, prompts, the codec's layout.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from v2.models.csm.config import CsmConfig
from v2.models.csm.model import Csm
from v2.models.qwen3 import Part, release_layout
from v2.models.weights import (
    empty_model, fill_from_files, raise_mismatch, read_config, set_tensor, stored_shapes, weight_files,
)

CODEC_PREFIX = "codec_model."
AUDIO_TABLES = ("backbone_model.embed_tokens.embed_audio_tokens.weight", "depth_decoder.model.embed_tokens.weight")


def check_keys(cfg: CsmConfig, layout: dict[str, Part], stored: dict[str, tuple[int, ...]]) -> list[str]:
    """Raise one CheckpointError listing every missing, unexpected and mis-shaped key (codec keys aside);
    return the audio table to fill from the other (none, or one when the tables are tied and one is stored)."""
    ours = {k: s for k, s in stored.items() if not k.startswith(CODEC_PREFIX)}
    missing = sorted(set(layout) - set(ours))
    fill = [t for t in AUDIO_TABLES if t in missing]
    if cfg.tie_codebooks_embeddings and len(fill) == 1:
        missing.remove(fill[0])
    else:
        fill = []
    misshaped = [f"{k}: checkpoint {list(s)} vs model {list(layout[k].shape)}"
                 for k, s in sorted(ours.items()) if k in layout and tuple(s) != layout[k].shape]
    raise_mismatch(missing, sorted(set(ours) - set(layout)), misshaped)
    return fill


def load_checkpoint(path: Path, *, dtype: torch.dtype, device: torch.device | str) -> Csm:
    """Build the model on the meta device and fill it tensor by tensor from safetensors (bf16 or any stored
    dtype -> `dtype`)."""
    cfg = CsmConfig.from_dict(read_config(path))
    model = empty_model(Csm, cfg)
    layout = release_layout(model)
    files = weight_files(path)
    fill = check_keys(cfg, layout, stored_shapes(files))
    params = fill_from_files(model, layout, files, dtype=dtype, device=device)
    with torch.no_grad():
        for table in fill:  # tied: the stored table fills the other
            other = next(t for t in AUDIO_TABLES if t != table)
            params[table].copy_(params[other])
    return model.eval()


def fill_seeded(model: Csm, seed: int, *, gain: float) -> None:
    """Every parameter drawn from `seed` on the CPU, in name order: matrices, tables and the depth heads
    ([N-1, H, V], fan-in H) ~ N(0, gain / sqrt(fan_in)), norm scales ~ 1 + N(0, 0.02); with
    `tie_codebooks_embeddings` the depth decoder's audio table is a copy of the backbone's."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        shape = tuple(p.shape)
        value = torch.randn(shape, generator=gen)
        if len(shape) >= 2:
            fan_in = shape[1] if name == "depth_decoder.codebooks_head.weight" else shape[-1]
            value *= gain / fan_in ** 0.5
        else:
            value = value.mul_(0.02).add_(1.0)
        set_tensor(model, name, value)
    if model.cfg.tie_codebooks_embeddings:
        set_tensor(model, AUDIO_TABLES[1], model.get_parameter(AUDIO_TABLES[0]).detach().clone())


def init_seeded(config: dict, seed: int, *, dtype: torch.dtype, device: torch.device | str) -> Csm:
    """The model of `config` (release schema) with weights drawn from `seed` (identical on every machine)."""
    model = empty_model(Csm, CsmConfig.from_dict(config))
    fill_seeded(model, seed, gain=1.0)
    return model.to(device=device, dtype=dtype).eval()
