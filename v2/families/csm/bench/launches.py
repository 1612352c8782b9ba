"""Device kernels one CSM frame step launches at the release's dimensions (`python -m v2.bench.launches
--family csm`, or `--card csm_1b`).

Owns: the release's shapes (`RELEASE`: sesame/csm-1b's config as transformers' `CsmConfig` defaults and the
original Sesame builders give it; designs/csm.md) built on the meta device in bf16 (no memory, no GPU), and
counting, with `v2.bench.launches`' counter, one frame step for a batch as the family's frame executor runs it
(`frame_executor.FrameExecutor.frame_step`): codebook 0 from lm_head and its draw, the depth decoder's N-1
steps over a per-frame cache with their draws (`Csm.complete_frame`), the frame's audio row and one backbone
decode row through a paged KV at mixed positions. Inputs are made before counting, as an executor's staged
buffers are.
Must not know: timing, requests, the runtime's executors.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections import Counter
from typing import Any, Callable

import torch

from v2.bench.launches import counted
from v2.models.csm.config import CsmConfig, CsmSampling
from v2.models.csm.model import Csm
from v2.models.csm.sampling import CsmSamplingTensors
from v2.models.weights import empty_model
from v2.sampling_settings import HeadSampling

BLOCK_SIZE = 16  # backbone KV rows per block (as the shipped cards)
_LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
RELEASE: dict[str, Any] = {
    "model_type": "csm", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "num_codebooks": 32, "vocab_size": 2051, "text_vocab_size": 128256, "bos_token_id": 128000,
    "eos_token_id": 128001, "audio_token_id": 128002, "audio_eos_token_id": 128003, "codebook_eos_token_id": 0,
    "codebook_pad_token_id": 2050, "tie_codebooks_embeddings": True, "rope_parameters": _LLAMA3,
    "depth_decoder_config": {
        "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 128, "intermediate_size": 8192, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "backbone_hidden_size": 2048, "num_codebooks": 32, "vocab_size": 2051, "rope_parameters": _LLAMA3}}
SAMPLING = CsmSampling(HeadSampling(0.9, 50, 1.0), HeadSampling(0.9, 50, 1.0))  # the release's assumed defaults


def release_model() -> Csm:
    """The release-shaped model on the meta device in bf16 (shapes only)."""
    return empty_model(Csm, CsmConfig.from_dict(copy.deepcopy(RELEASE))).to(torch.bfloat16)


def _inputs(model: Csm, bucket: int, context: int) -> dict[str, Any]:
    """A frame step's staged inputs for `bucket` rows at mixed positions below `context`."""
    dev, dtype, cfg = model.device, model.dtype, model.cfg
    width = -(-context // BLOCK_SIZE)  # blocks per row
    return dict(
        cache=model.allocate_paged_kv(bucket * width, BLOCK_SIZE),
        tables=torch.arange(bucket * width, device=dev).view(bucket, width),  # [B, W]
        depth_cache=model.allocate_depth_kv(bucket),
        s=CsmSamplingTensors.build([SAMPLING] * bucket, list(range(bucket)), dev),
        positions=torch.tensor([(37 * i) % (context - 64) + 32 for i in range(bucket)], device=dev),
        hidden=torch.empty(bucket, cfg.hidden_size, dtype=dtype, device=dev),
        frame=torch.empty(bucket, dtype=torch.long, device=dev), valid=torch.ones(bucket, dtype=torch.bool, device=dev),
        logits=torch.empty(bucket, cfg.vocab_size, dtype=torch.float32, device=dev))


def count(model: Csm, bucket: int, context: int, use_kernels: bool) -> dict[str, Counter[str]]:
    """Launches of one frame step and of its pieces: "step" (the executor's frame step), "frame" (codebook 0
    and the depth decoder with every draw: `complete_frame`), "draws" (the N draws alone)."""
    x = _inputs(model, bucket, context)
    s, n = x["s"], model.num_codebooks

    def frame() -> Any:
        h = x["hidden"]
        return model.complete_frame(h, model.c0_logits(h), s, x["frame"], valid=x["valid"], depth_cache=x["depth_cache"])

    def step() -> None:
        done = frame()
        row = model.embed_frame(done.codes)  # [B, H]
        model.backbone_model.forward_cached(row[:, None], x["cache"], x["tables"], x["positions"][:, None],
                                            x["valid"][:, None], context)

    def draws() -> None:
        d = model.draws(s, x["frame"])
        for k in range(n):
            d.draw(k, x["logits"])

    # after one warm-up call, as before a graph capture: what a step makes once per device (the depth RoPE tables)
    run: Callable[[Callable[[], Any]], Counter[str]] = lambda fn: counted(fn, use_kernels)  # noqa: E731
    return {"step": run(step), "frame": run(frame), "draws": run(draws)}


def bucket_row(model: Csm, bucket: int, context: int) -> dict[str, Any]:
    """One bucket's launches with the torch forms and with the Triton kernels: totals, every kernel of the step
    by name (`*_ops`, most first), and the step split into the backbone (lm_head, the audio row, one decode
    row), the depth decoder (its N-1 steps) and sampling (N draws)."""
    row: dict[str, Any] = {"bucket": bucket}
    for label, on in (("torch", False), ("kernels", True)):
        counts = count(model, bucket, context, on)
        t = {k: sum(c.values()) for k, c in counts.items()}
        row[f"{label}_launches"] = t["step"]
        row[f"{label}_parts"] = {"backbone": t["step"] - t["frame"], "depth_decoder": t["frame"] - t["draws"],
                                 "sampling": t["draws"]}
        row[f"{label}_ops"] = dict(counts["step"].most_common())
        if on:
            row["triton"] = {k.split(":", 1)[1]: v for k, v in sorted(counts["step"].items()) if k.startswith("triton:")}
    return row


def options(parser: argparse.ArgumentParser) -> None:
    """No options of its own: one release size."""


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each of `args.buckets` (`bucket_row`); the per-kernel table goes to stderr."""
    model = release_model()
    rows = []
    for bucket in args.buckets:
        row = bucket_row(model, bucket, args.context)
        rows.append(row)
        print(f"bucket={bucket} torch={row['torch_launches']} {row['torch_parts']} "
              f"kernels={row['kernels_launches']} {row['kernels_parts']}", file=sys.stderr)
        for name, k in row["kernels_ops"].items():
            print(f"  {name:<28} {k:>6}", file=sys.stderr)
    return {"size": "1b"}, rows
