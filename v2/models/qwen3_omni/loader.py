"""Qwen3-Omni checkpoint loading by the release's key names, one part (thinker, talker, code2wav) at a time.

Owns: `release_layout` (every release key a module tree's parameters are made of: q/k/v fused into
`Qwen3Attention.qkv_proj`, gate/up into `Qwen3MLP.gate_up_proj` (dense MLPs and the talker's shared expert),
and the per-expert keys `mlp.experts.E.{gate,up,down}_proj.weight` into the stacked `Experts` parameters),
`load_part` (the strict check of one part's keys under its release prefix, then each tensor read once into the
compute dtype), `open_checkpoint` (config.json, generation_config.json, the weight files) and the release
keys that are present but not modelled (`thinker.visual.*`: the vision tower). A part's module tree names its
parameters as the release does below the part's prefix (`thinker.` + `model.layers.0.self_attn...`). The file
handling is weights.py's.
Must not know: the runtime, cards, requests, prompts, what any part computes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from v2.models.qwen3 import Qwen3Attention, Qwen3MLP
from v2.models.qwen3_omni.config import Qwen3OmniConfig
from v2.models.qwen3_omni.moe import Experts
from v2.models.weights import (
    CheckpointError, empty_model, open_weights, raise_mismatch, read_config, read_tensor, set_tensor,
    stored_by_file, stored_shapes, weight_files,
)

M = TypeVar("M", bound=nn.Module)
NOT_MODELLED = ("thinker.visual.",)  # present in the release, not built (images and video are refused)


@dataclass(frozen=True)
class Slot:
    """Where one release key lives: `param[expert][start : start + shape[0]]` (`expert` None: `param[start:...]`)."""

    param: str
    expert: int | None
    start: int
    shape: tuple[int, ...]


def release_layout(model: nn.Module) -> dict[str, Slot]:
    """Release key (relative to the part) -> slot, for every parameter of `model`."""
    fused: dict[str, list[tuple[str, int | None, int]]] = {}  # param -> [(release key, expert, rows)]
    for name, m in model.named_modules():
        base = name + "." if name else ""
        if isinstance(m, Qwen3Attention):
            d, c = m.cfg.head_dim, m.cfg
            fused[base + "qkv_proj.weight"] = [(base + "q_proj.weight", None, c.num_heads * d),
                                               (base + "k_proj.weight", None, c.num_kv_heads * d),
                                               (base + "v_proj.weight", None, c.num_kv_heads * d)]
        elif isinstance(m, Qwen3MLP):
            i = m.gate_up_proj.weight.shape[0] // 2
            fused[base + "gate_up_proj.weight"] = [(base + "gate_proj.weight", None, i),
                                                   (base + "up_proj.weight", None, i)]
        elif isinstance(m, Experts):
            n, i = m.gate_up_proj.shape[0], m.intermediate
            fused[base + "gate_up_proj"] = [(f"{base}{e}.{p}_proj.weight", e, i) for e in range(n)
                                            for p in ("gate", "up")]
            fused[base + "down_proj"] = [(f"{base}{e}.down_proj.weight", e, m.down_proj.shape[1])
                                         for e in range(n)]
    layout: dict[str, Slot] = {}
    for name, p in model.named_parameters():
        if name not in fused:
            layout[name] = Slot(name, None, 0, tuple(p.shape))
            continue
        inner = tuple(p.shape[2:] if p.dim() == 3 else p.shape[1:])
        start, last = 0, None
        for key, expert, rows in fused[name]:
            start = 0 if expert != last else start
            layout[key] = Slot(name, expert, start, (rows, *inner))
            start, last = start + rows, expert
    return layout


@dataclass(frozen=True)
class Checkpoint:
    """A release directory: its config, its talker sampling defaults and where each stored key is."""

    path: Path
    config: Qwen3OmniConfig
    files: dict[str, Path]


def open_checkpoint(path: Path) -> Checkpoint:
    """Read config.json (and generation_config.json when present) and index the weight files."""
    generation: dict = {}
    gen_file = path / "generation_config.json"
    if gen_file.is_file():
        try:
            generation = json.loads(gen_file.read_text())
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{gen_file}: invalid JSON ({e})") from e
    return Checkpoint(path, Qwen3OmniConfig.from_dict(read_config(path), generation), weight_files(path))


def load_part(model: M, ckpt: Checkpoint, prefix: str, *, dtype: torch.dtype, device: torch.device | str) -> M:
    """Fill `model` (on the meta device or not) from the stored keys under `prefix` ("thinker.", "talker.",
    "code2wav."): one CheckpointError listing every missing, unexpected (under the prefix, not `NOT_MODELLED`)
    and mis-shaped key; each tensor read once and cast to `dtype` on `device`."""
    layout = {prefix + k: v for k, v in release_layout(model).items()}
    stored = {k: s for k, s in stored_shapes(ckpt.files).items()
              if k.startswith(prefix) and not k.startswith(NOT_MODELLED)}
    misshaped = [f"{k}: checkpoint {list(s)} vs model {list(layout[k].shape)}"
                 for k, s in sorted(stored.items()) if k in layout and tuple(s) != layout[k].shape]
    raise_mismatch(sorted(set(layout) - set(stored)), sorted(set(stored) - set(layout)), misshaped)
    for name, p in list(model.named_parameters()):  # one allocation per parameter, filled below
        set_tensor(model, name, torch.empty(p.shape, dtype=dtype, device=device))
    params = dict(model.named_parameters())
    files = {k: f for k, f in ckpt.files.items() if k in layout}
    with torch.no_grad():
        for file, keys in stored_by_file(files):
            with open_weights(file) as f:
                for key in keys:
                    s = layout[key]
                    target = params[s.param] if s.expert is None else params[s.param][s.expert]
                    target[s.start : s.start + s.shape[0]] = read_tensor(f, key, file)
    return model.eval()


def build_part(cls: type[M], cfg: object, ckpt: Checkpoint, prefix: str, *, dtype: torch.dtype,
               device: torch.device | str) -> M:
    """`cls(cfg)` built on the meta device and filled by `load_part`."""
    return load_part(empty_model(cls, cfg), ckpt, prefix, dtype=dtype, device=device)
