"""Mimi checkpoint loading (strict names under a key prefix) and seeded initialisation.

Owns: reading the Mimi config (a checkpoint's `config.json`, or one of its nested dicts such as the CSM
checkpoint's `codec_config`), which stored keys the codec needs (its own parameter names after `prefix`:
"codec_model." inside a CSM checkpoint, "" for a standalone Mimi checkpoint; keys outside the prefix
belong to someone else and are not looked at), which it knows and skips (the codebooks' `initialized`
flags), one error naming every missing, unexpected and mis-shaped key, tensors read one at a time into
the target dtype (bfloat16 storage becomes float32 compute by default), and seeded weights for a config
(tests of other dimensions): per parameter kind, scaled so activations stay O(1).
Must not know: the runtime, the CSM backbone, families.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Mapping, TypeVar

import torch
from torch import Tensor, nn

from v2.models.config import ConfigError
from v2.models.mimi.config import MimiConfig
from v2.models.weights import (
    empty_model, open_weights, raise_mismatch, read_config, read_tensor, set_tensor, stored_shapes, weight_files,
)

M = TypeVar("M", bound=nn.Module)

_SKIPPED = re.compile(r"\.codebook\.initialized$")


def read_mimi_config(path: Path, config_key: str | None = None) -> MimiConfig:
    """The Mimi config of checkpoint directory `path`: its config.json, or the dict under `config_key`."""
    d: Any = read_config(path)
    where = ""
    if config_key is not None:
        if not isinstance(d, Mapping) or config_key not in d:
            raise ConfigError(f"{path / 'config.json'}: missing field '{config_key}'")
        d, where = d[config_key], f"{config_key}."
    return MimiConfig.from_dict(d, file=str(path / "config.json"), where=where)


def checkpoint_files(path: Path) -> dict[str, Path]:
    """Every stored key's file, for a checkpoint directory (single or sharded safetensors) or one
    `.safetensors` file."""
    if path.is_file():
        with open_weights(path) as f:
            return {k: path for k in f.keys()}
    return weight_files(path)


def load(cls: type[M], files: dict[str, Path], cfg: MimiConfig, *, prefix: str, dtype: torch.dtype,
         device: torch.device | str) -> M:
    """Build `cls(cfg)` on the meta device and fill it tensor by tensor from the safetensors `files` (key ->
    file), reading the keys `prefix + name`."""
    model = empty_model(cls, cfg)
    expected = {prefix + k: tuple(v.shape) for k, v in model.state_dict().items()}
    stored = {k: s for k, s in stored_shapes(files).items() if k.startswith(prefix)}
    missing = sorted(k for k in expected if k not in stored)
    misshaped = sorted(f"{k}: checkpoint {list(stored[k])} vs model {list(s)}"
                       for k, s in expected.items() if k in stored and tuple(stored[k]) != s)
    unexpected = sorted(k for k in stored if k not in expected and not _SKIPPED.search(k))
    raise_mismatch(missing, unexpected, misshaped)
    with ExitStack() as stack:
        handles = {file: stack.enter_context(open_weights(file)) for file in {files[k] for k in expected}}
        for key in expected:
            value = read_tensor(handles[files[key]], key, files[key])
            set_tensor(model, key[len(prefix) :], value.to(device=device, dtype=dtype))
    return model.eval()


def _seeded_value(module: nn.Module, leaf: str, shape: tuple[int, ...], gen: torch.Generator) -> Tensor:
    """Weights ~ N(0, 1 / fan_in), biases ~ N(0, 0.02), norm weights ~ 1, layer scales ~ 0.1, codebook sums
    ~ N(0, 1) with usage in [1, 2)."""
    noise = torch.randn(shape, generator=gen)
    if leaf == "cluster_usage":
        return 1.0 + torch.rand(shape, generator=gen)
    if leaf == "embed_sum":
        return noise
    if leaf == "scale":
        return 0.1 * (1.0 + 0.02 * noise)
    if leaf == "bias":
        return noise * 0.02
    if isinstance(module, nn.ConvTranspose1d):  # [in, out / groups, k]: each output sums in / groups x taps
        fan_in = shape[0] // module.groups * shape[2] // module.stride[0]
        return noise / max(1, fan_in) ** 0.5
    if isinstance(module, (nn.Conv1d, nn.Linear)):
        fan_in = shape[1] * (shape[2] if len(shape) == 3 else 1)
        return noise / fan_in ** 0.5
    return 1.0 + 0.02 * noise  # LayerNorm weights


def seeded(cls: type[M], cfg: MimiConfig, seed: int, *, dtype: torch.dtype, device: torch.device | str) -> M:
    """`cls(cfg)` with values drawn from `seed` on the CPU in parameter-name order (the same everywhere)."""
    model = empty_model(cls, cfg)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        module_name, _, leaf = name.rpartition(".")
        value = _seeded_value(model.get_submodule(module_name), leaf, tuple(p.shape), gen)
        set_tensor(model, name, value.to(device=device, dtype=dtype))
    return model.eval()
