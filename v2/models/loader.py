"""Checkpoint loading (safetensors only, never pickle) and seeded initialisation.

Owns: finding the weight files (`model.safetensors` or a sharded `model.safetensors.index.json`),
mapping release key names onto the module tree, accepting-and-checking tied aliases, a complete
mismatch report (missing / unexpected / mis-shaped keys by name), and tensor-by-tensor loading into
a model built on the meta device, so at most one full copy of the weights is ever held.
Must not know: the runtime, cards, requests.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Iterator, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor, nn

from v2.models.config import ConfigError, MossTTSLocalConfig

M = TypeVar("M", bound=nn.Module)

# Release keys that are copies of other weights (tied heads): value = the authoritative key.
_TIED = [
    (re.compile(r"^text_lm_head\.weight$"), lambda m: "transformer.embed_tokens.weight"),
    (re.compile(r"^lm_head\.weight$"), lambda m: "transformer.embed_tokens.weight"),
    (re.compile(r"^audio_lm_heads\.(\d+)\.weight$"), lambda m: f"audio_embeddings.{m.group(1)}.weight"),
]
_PREFIXES = ("model.",)


class CheckpointError(ValueError):
    """The checkpoint does not fit the config; the message names every bad key or file."""


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


def weight_files(path: Path) -> dict[str, Path]:
    """Map every stored key to the file that holds it."""
    index = path / "model.safetensors.index.json"
    single = path / "model.safetensors"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index}: not a valid safetensors index ({e})") from e
        return {k: path / v for k, v in weight_map.items()}
    if single.is_file():
        with _open(single) as f:
            return {k: single for k in f.keys()}
    raise CheckpointError(f"{path}: no model.safetensors or model.safetensors.index.json")


def _open(file: Path):  # type: ignore[no-untyped-def]
    if not file.is_file():
        raise CheckpointError(f"{file}: weight file is missing")
    try:
        return safe_open(str(file), framework="pt", device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{file}: not a readable safetensors file ({e})") from e


def _stored(files: dict[str, Path]) -> Iterator[tuple[Path, list[str]]]:
    by_file: dict[Path, list[str]] = {}
    for key, file in files.items():
        by_file.setdefault(file, []).append(key)
    yield from by_file.items()


@contextlib.contextmanager
def _no_init() -> Iterator[None]:
    """Skip nn.init's default initialisers (every value is about to be overwritten)."""
    names = ("normal_", "uniform_", "kaiming_uniform_", "ones_", "zeros_", "trunc_normal_")
    saved = {n: getattr(nn.init, n) for n in names}
    for n in names:
        setattr(nn.init, n, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(nn.init, n, fn)


def empty_model(cls: type[M], cfg: MossTTSLocalConfig) -> M:
    """The module tree on the meta device: shapes only, no memory, no initialisation."""
    with torch.device("meta"), _no_init():
        return cls(cfg)  # type: ignore[call-arg]


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
    missing = sorted(set(expected) - set(mapping.values()))
    if missing or unexpected or misshaped:
        parts = []
        if missing:
            parts.append(f"missing keys ({len(missing)}): {', '.join(missing)}")
        if unexpected:
            parts.append(f"unexpected keys ({len(unexpected)}): {', '.join(unexpected)}")
        if misshaped:
            parts.append(f"mis-shaped keys ({len(misshaped)}): {'; '.join(misshaped)}")
        raise CheckpointError("checkpoint does not match config.json: " + " | ".join(parts))
    return mapping


def _set_tensor(model: nn.Module, name: str, value: Tensor) -> None:
    module_name, _, leaf = name.rpartition(".")
    module = model.get_submodule(module_name)
    module._parameters[leaf] = nn.Parameter(value, requires_grad=False)


def read_config(path: Path) -> dict:
    file = path / "config.json"
    if not file.is_file():
        raise CheckpointError(f"{path}: config.json is missing")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{file}: invalid JSON ({e})") from e


def load_checkpoint(cls: type[M], path: Path, *, dtype: torch.dtype, device: torch.device | str) -> M:
    """Build `cls(config)` on the meta device and fill it tensor by tensor from safetensors."""
    model = empty_model(cls, MossTTSLocalConfig.from_dict(read_config(path)))
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    files = weight_files(path)
    stored: dict[str, tuple[int, ...]] = {}
    for file, keys in _stored(files):
        with _open(file) as f:
            present = set(f.keys())
            for key in keys:
                if key not in present:
                    raise CheckpointError(f"{file}: index lists '{key}' but the file does not hold it")
                stored[key] = tuple(f.get_slice(key).get_shape())
    mapping = check_keys(expected, stored)
    aliases = []
    for file, keys in _stored(files):
        with _open(file) as f:
            for key in keys:
                if key in mapping:
                    _set_tensor(model, mapping[key], _read(f, key, file).to(device=device, dtype=dtype))
                else:
                    aliases.append((file, key))
    for file, key in aliases:  # tied copies: must equal the weights they alias
        target = tied_target(canonical_name(key))
        with _open(file) as f:
            alias = _read(f, key, file).to(device=device, dtype=dtype)
        if not torch.equal(alias, model.get_parameter(target)):  # type: ignore[arg-type]
            raise CheckpointError(f"tied key '{key}' differs from '{target}'")
    return model.eval()


def _read(f, key: str, file: Path) -> Tensor:  # type: ignore[no-untyped-def]
    try:
        return f.get_tensor(key)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{file}: cannot read tensor '{key}' ({e})") from e


def init_seeded(cls: type[M], config: dict, seed: int, *, dtype: torch.dtype,
                device: torch.device | str) -> M:
    """Build `cls(config)` with weights drawn from `seed` on CPU (identical on every machine).

    Linear and embedding weights ~ N(0, 0.5 / sqrt(fan_in)), norms at 1 with small noise, biases
    small. The final local LayerNorm's bias is leaned towards the stop head's "continue" row so that
    a seeded model speaks for tens of frames instead of stopping after one or two.
    """
    model = empty_model(cls, MossTTSLocalConfig.from_dict(config))
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        shape = tuple(p.shape)
        if len(shape) == 2:
            value = torch.randn(shape, generator=gen) * (0.5 / shape[-1] ** 0.5)
        elif name.endswith("bias"):
            value = torch.randn(shape, generator=gen) * 0.02
        else:
            value = 1.0 + torch.randn(shape, generator=gen) * 0.02
        _set_tensor(model, name, value)
    head = model.get_parameter("local_text_lm_head.weight")
    lean = head[0] - head[1]
    bias = model.get_parameter("local_transformer.ln_f.bias")
    _set_tensor(model, "local_transformer.ln_f.bias", bias + lean * (3.0 / lean.dot(lean)))
    return model.to(device=device, dtype=dtype).eval()
