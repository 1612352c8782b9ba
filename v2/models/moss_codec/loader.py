"""Codec checkpoint loading and seeded initialisation.

Owns: which release keys the decoder needs (stages `decoder.*`, the first 12 quantizers' codebooks and
output projections, `quantizer.output_proj`) and which it knows and skips (the encoder, the encode-side
projections, quantizers 12..31); the same for the encoder when asked (`encoder=True`: `encoder.*`,
`quantizer.input_proj`, the first 12 quantizers' `in_proj`, codebook, `out_proj`; it skips the decoder side),
folding weight norm (`parametrizations.weight.original0/1` or `weight_g/weight_v`: w = g * v / ||v||, the
norm per output channel) into plain weights, and the seeded codec of the tiny card (decoder and encoder).
Must not know: the runtime, the TTS model.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path

import torch
from torch import Tensor, nn

from v2.models.moss_codec.config import DECODE_CODEBOOKS, CodecConfig
from v2.models.weights import (
    M, empty_model, fill_seeded, open_weights, raise_mismatch, read_config, read_tensor, set_tensor, stored_shapes,
    weight_files,
)

_WEIGHT_NORMED = re.compile(r"^quantizer\.(quantizers\.\d+\.(in|out)_proj|input_proj|output_proj)$")
_NORM_PAIRS = (("parametrizations.weight.original0", "parametrizations.weight.original1"), ("weight_g", "weight_v"))


def _unused_quantizer(key: str) -> bool:
    m = re.match(r"^quantizer\.quantizers\.(\d+)\.", key)
    return m is not None and int(m.group(1)) >= DECODE_CODEBOOKS


def _skipped(key: str) -> bool:
    """Release keys the decoder knows and does not need."""
    if key.startswith(("encoder.", "quantizer.input_proj.")) or re.match(r"^quantizer\.quantizers\.\d+\.in_proj\.", key):
        return True
    return _unused_quantizer(key)


def _skipped_by_encoder(key: str) -> bool:
    """Release keys the encoder knows and does not need."""
    return key.startswith(("decoder.", "quantizer.output_proj.")) or _unused_quantizer(key)


def plan_keys(expected: dict[str, tuple[int, ...]], stored: dict[str, tuple[int, ...]], *,
              encoder: bool = False) -> dict[str, tuple[str, ...]]:
    """{model key: the stored key(s) it is built from}; raises listing every mismatch by name. `encoder`:
    the model is the encoder side (the decoder side's keys are then the known-and-skipped ones)."""
    skipped = _skipped_by_encoder if encoder else _skipped
    plan: dict[str, tuple[str, ...]] = {}
    missing, misshaped = [], []
    for name, shape in expected.items():
        prefix = name.removesuffix(".weight")
        sources: tuple[str, ...] = (name,)
        if name.endswith(".weight") and _WEIGHT_NORMED.match(prefix):
            pairs = [tuple(f"{prefix}.{p}" for p in pair) for pair in _NORM_PAIRS]
            sources = next((p for p in pairs if all(k in stored for k in p)), (name,))
        if not all(k in stored for k in sources):
            missing.append(name if len(sources) == 1 else " + ".join(sources))
            continue
        got = stored[sources[-1]]
        if len(got) == 3 and got[-1] == 1:  # a 1x1 conv weight [out, in, 1]
            got = got[:2]
        if tuple(got) != shape:
            misshaped.append(f"{sources[-1]}: checkpoint {list(stored[sources[-1]])} vs model {list(shape)}")
        plan[name] = sources
    used = {k for sources in plan.values() for k in sources}
    unexpected = sorted(k for k in stored if k not in used and not skipped(k))
    raise_mismatch(sorted(missing), unexpected, misshaped)
    return plan


def fold_weight_norm(g: Tensor, v: Tensor) -> Tensor:
    """w = g * v / ||v||, the norm over every dim but the first; returns [out, in] (kernel dim dropped)."""
    g, v = g.float(), v.float()
    norm = v.flatten(1).norm(dim=1).view(-1, *([1] * (v.dim() - 1)))
    return (g * v / norm).flatten(1)


def load_codec(cls: type[M], path: Path, *, dtype: torch.dtype, device: torch.device | str,
               encoder: bool = False) -> M:
    """Build the decoder (or, with `encoder`, the encoder) on the meta device and fill it tensor by tensor
    from safetensors."""
    model = empty_model(cls, CodecConfig.from_dict(read_config(path)))
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    files = weight_files(path)
    plan = plan_keys(expected, stored_shapes(files), encoder=encoder)
    with ExitStack() as stack:
        handles = {file: stack.enter_context(open_weights(file)) for file in set(files.values())}

        def read(key: str) -> Tensor:
            return read_tensor(handles[files[key]], key, files[key])

        for name, sources in plan.items():
            value = fold_weight_norm(read(sources[0]), read(sources[1])) if len(sources) == 2 else read(sources[0])
            set_tensor(model, name, value.reshape(expected[name]).to(device=device, dtype=dtype))
    return model.eval()


def seeded_codec(cls: type[M], config: dict, seed: int, *, dtype: torch.dtype, device: torch.device | str,
                 init_device: torch.device | str = "cpu") -> M:
    """The decoder with weights drawn from `seed` on CPU (matrices ~ N(0, 1 / sqrt(fan_in))); the last
    stage's output projection is scaled down so the waveform sits at speech-like levels (|x| mostly < 1)."""
    cfg = CodecConfig.from_dict(config)
    model = empty_model(cls, cfg)
    fill_seeded(model, seed, gain=1.0, device=init_device)
    last = f"decoder.{cfg.stages[-1].index}.output_proj.weight"
    set_tensor(model, last, model.get_parameter(last) * 0.05)
    return model.to(device=device, dtype=dtype).eval()


SHARED_WITH_DECODER = re.compile(r"^quantizer\.quantizers\.\d+\.(codebook\.weight|out_proj\.(weight|bias))$")


def seeded_encoder(cls: type[M], config: dict, seed: int, decoder: nn.Module, *, dtype: torch.dtype,
                   device: torch.device | str, init_device: torch.device | str = "cpu") -> M:
    """The encoder with weights drawn from `seed` on CPU like `seeded_codec`'s, except the tensors one
    checkpoint shares between both sides (the quantizers' codebooks and `out_proj`), taken from `decoder`,
    so that codes mean the same vectors when encoded and when decoded."""
    model = empty_model(cls, CodecConfig.from_dict(config))
    fill_seeded(model, seed, gain=1.0, device=init_device)
    shared = dict(decoder.named_parameters())
    for name, _ in model.named_parameters():
        if SHARED_WITH_DECODER.match(name):
            set_tensor(model, name, shared[name].detach().to(device=init_device, dtype=torch.float32).clone())
    return model.to(device=device, dtype=dtype).eval()
