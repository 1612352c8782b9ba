"""Qwen3 codec checkpoint loading (strict names) and seeded initialisation.

Owns: which release keys each side needs (`decoder.*` for the decoder, `encoder.*` for the encoder: the
model's own parameter names under that prefix) and which it knows and skips (the other side; the
decoder's quantizer `input_proj`, used only when training; the encoder's quantizer `output_proj` and
codebook `initialized` flags), one error naming every missing, unexpected and mis-shaped key, and seeded
weights for a config (a tiny card's codec): per module type, scaled so activations stay O(1).
Must not know: the runtime, the talker.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path

import torch
from torch import Tensor, nn

from v2.models.qwen3_codec.config import Qwen3CodecConfig
from v2.models.weights import (
    M, empty_model, open_weights, raise_mismatch, read_config, read_tensor, set_tensor, stored_shapes, weight_files,
)

_SKIPPED = {
    "decoder": re.compile(r"^(encoder\.|decoder\.quantizer\.rvq_(first|rest)\.input_proj\.weight$)"),
    "encoder": re.compile(r"^(decoder\.|encoder\.quantizer\.\w+_residual_vector_quantizer\.(output_proj\.weight"
                          r"|layers\.\d+\.codebook\.initialized)$)"),
}


def plan_keys(expected: dict[str, tuple[int, ...]], stored: dict[str, tuple[int, ...]], side: str) -> None:
    """Raise one CheckpointError naming every missing, unexpected and mis-shaped key of `side`."""
    missing = sorted(k for k in expected if k not in stored)
    misshaped = sorted(f"{k}: checkpoint {list(stored[k])} vs model {list(s)}"
                       for k, s in expected.items() if k in stored and tuple(stored[k]) != s)
    unexpected = sorted(k for k in stored if k not in expected and not _SKIPPED[side].match(k))
    raise_mismatch(missing, unexpected, misshaped)


def load_side(cls: type[M], path: Path, side: str, *, dtype: torch.dtype, device: torch.device | str) -> M:
    """Build `side` ("decoder" or "encoder") on the meta device and fill it tensor by tensor from safetensors."""
    model = empty_model(cls, Qwen3CodecConfig.from_dict(read_config(path)))
    expected = {f"{side}.{k}": tuple(v.shape) for k, v in model.state_dict().items()}
    files = weight_files(path)
    plan_keys(expected, stored_shapes(files), side)
    with ExitStack() as stack:
        handles = {file: stack.enter_context(open_weights(file)) for file in set(files.values())}
        for key in expected:
            value = read_tensor(handles[files[key]], key, files[key])
            set_tensor(model, key[len(side) + 1 :], value.to(device=device, dtype=dtype))
    return model.eval()


def _seeded_value(module: nn.Module, leaf: str, shape: tuple[int, ...], gen: torch.Generator) -> Tensor:
    """A value for parameter `leaf` of `module`: weights ~ N(0, 1 / fan_in), biases ~ N(0, 0.02), norms ~ 1,
    residual scales 0.1, SnakeBeta's log-scale parameters ~ N(0, 0.1), codebooks ~ N(0, 1) with usage >= 1."""
    noise = torch.randn(shape, generator=gen)
    if leaf == "bias":
        return noise * 0.02
    if leaf == "cluster_usage":
        return 1.0 + torch.rand(shape, generator=gen)
    if leaf in ("embedding_sum", "embed_sum"):
        return noise
    if leaf in ("alpha", "beta"):
        return noise * 0.1
    if leaf in ("scale", "gamma"):
        return 0.1 * (1.0 + 0.02 * noise)
    if isinstance(module, nn.ConvTranspose1d):
        fan_in = shape[0] * shape[2] // module.stride[0]
        return noise / fan_in ** 0.5
    if isinstance(module, (nn.Conv1d, nn.Linear)):
        fan_in = shape[1] * (shape[2] if len(shape) == 3 else 1)
        return noise / fan_in ** 0.5
    return 1.0 + 0.02 * noise  # norm weights


def seeded_side(cls: type[M], config: dict, seed: int, side: str, *, dtype: torch.dtype,
                device: torch.device | str) -> M:
    """`side` of the codec for `config` (a config.json dict) with values drawn from `seed` on CPU in name
    order: the same seed gives the same weights on every machine."""
    model = empty_model(cls, Qwen3CodecConfig.from_dict(config))
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        module_name, _, leaf = name.rpartition(".")
        value = _seeded_value(model.get_submodule(module_name), leaf, tuple(p.shape), gen)
        set_tensor(model, name, value.to(device=device, dtype=dtype))
    return model.eval()
