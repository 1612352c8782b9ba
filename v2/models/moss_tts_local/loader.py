"""MOSS-TTS-Local checkpoint loading and seeded initialisation.

Owns: mapping the release's key names onto the module tree (an optional `model.` prefix), accepting
tied aliases only when they equal the weights they alias, and the seeded weights of the tiny card.
The file handling (safetensors only, one tensor at a time into a meta-built model, so one full copy of
the weights at most) lives in weights.py.
Must not know: the runtime, cards, requests.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import nn

from v2.models.moss_tts_local.config import MossTTSLocalConfig
from v2.models.qwen3 import Part
from v2.models.qwen3 import release_layout as qwen3_layout
from v2.models.weights import (
    M, CheckpointError, empty_model, fill_seeded, open_weights, raise_mismatch, read_config, read_tensor,
    set_tensor, stored_by_file, stored_shapes, weight_files,
)

# Release keys that are copies of other weights (tied heads): value = the authoritative key.
_TIED = [
    (re.compile(r"^text_lm_head\.weight$"), lambda m: "transformer.embed_tokens.weight"),
    (re.compile(r"^lm_head\.weight$"), lambda m: "transformer.embed_tokens.weight"),
    (re.compile(r"^audio_lm_heads\.(\d+)\.weight$"), lambda m: f"audio_embeddings.{m.group(1)}.weight"),
]
_PREFIXES = ("model.",)


def canonical_name(key: str) -> str:
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def tied_target(key: str) -> str | None:
    for pattern, target in _TIED:
        m = pattern.match(key)
        if m:
            return target(m)
    return None


def release_layout(model: nn.Module) -> dict[str, Part]:
    """Every release key the model's parameters are made of (fused parameters split into their parts: the
    decoder stack's own layout, `qwen3.release_layout`)."""
    cfg = getattr(model, "cfg", None)
    if not isinstance(cfg, MossTTSLocalConfig):
        raise TypeError(f"model: expected a module with a MossTTSLocalConfig `cfg`, got {type(model).__name__}")
    return qwen3_layout(model)


def check_keys(expected: dict[str, tuple[int, ...]], stored: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """Match stored keys to expected ones; return {stored key: model key}; raise listing every mismatch."""
    mapping: dict[str, str] = {}
    unexpected, misshaped = [], []
    for key, shape in sorted(stored.items()):
        name = canonical_name(key)
        if name in expected:
            if tuple(shape) != expected[name]:
                misshaped.append(f"{key}: checkpoint {list(shape)} vs model {list(expected[name])}")
            mapping[key] = name
        elif (target := tied_target(name)) is not None and target in expected:
            continue  # tied alias, checked against its target after loading
        else:
            unexpected.append(key)
    raise_mismatch(sorted(set(expected) - set(mapping.values())), unexpected, misshaped)
    return mapping


def load_checkpoint(cls: type[M], path: Path, *, dtype: torch.dtype, device: torch.device | str) -> M:
    """Build `cls(config)` on the meta device and fill it tensor by tensor from safetensors."""
    model = empty_model(cls, MossTTSLocalConfig.from_dict(read_config(path)))
    layout = release_layout(model)
    files = weight_files(path)
    mapping = check_keys({k: part.shape for k, part in layout.items()}, stored_shapes(files))
    for name, p in list(model.named_parameters()):  # one allocation per parameter, filled below
        set_tensor(model, name, torch.empty(p.shape, dtype=dtype, device=device))
    params = dict(model.named_parameters())
    aliases = []
    with torch.no_grad():
        for file, keys in stored_by_file(files):
            with open_weights(file) as f:
                for key in keys:
                    if key not in mapping:
                        aliases.append((file, key))
                        continue
                    part = layout[mapping[key]]
                    params[part.param][part.start : part.start + part.shape[0]] = read_tensor(f, key, file)
    for file, key in aliases:  # tied copies: must equal the weights they alias
        target = tied_target(canonical_name(key))
        with open_weights(file) as f:
            alias = read_tensor(f, key, file).to(device=device, dtype=dtype)
        if not torch.equal(alias, model.get_parameter(target)):  # type: ignore[arg-type]
            raise CheckpointError(f"tied key '{key}' differs from '{target}'")
    return model.eval()


def init_seeded(cls: type[M], config: dict, seed: int, *, dtype: torch.dtype, device: torch.device | str,
                init_device: torch.device | str = "cpu") -> M:
    """Build `cls(config)` with weights drawn from `seed` on CPU (identical on every machine).

    Values from `fill_seeded` with gain 0.5. The final local LayerNorm's bias is leaned towards the stop head's "continue" row so that
    a seeded model speaks for tens of frames instead of stopping after one or two.
    """
    model = empty_model(cls, MossTTSLocalConfig.from_dict(config))
    fill_seeded(model, seed, gain=0.5, device=init_device)
    head = model.get_parameter("local_text_lm_head.weight")
    lean = head[0] - head[1]
    bias = model.get_parameter("local_transformer.ln_f.bias")
    set_tensor(model, "local_transformer.ln_f.bias", bias + lean * (3.0 / lean.dot(lean)))
    return model.to(device=device, dtype=dtype).eval()
