"""Device kernels one Qwen3-TTS frame step launches at the release's dimensions (`python -m v2.bench.launches
--family qwen3_tts [--size 1.7b 0.6b]`, both sizes by default).

Owns: building the model layer's `Qwen3TTS` from a release-shaped config on the meta device (no memory, no
GPU; `--size`: its `options`) and counting, with `v2.bench.launches`' counter, one frame step for a batch as a runtime runs it: the model
layer's `frame_step` (the code predictor's G-1 = 15 steps over a per-frame cache and their 15 draws, the
frame embedding plus the text row, one talker decode row through a paged KV at mixed positions) and `choose`
(group 0: repetition penalty, EOS and control-id masks, its draw), as the family's executor calls them (no
raw code-predictor logits kept). Inputs are made before counting, as an executor's staged buffers are; each
count follows one warm-up call (what a step makes once per device, e.g. RoPE tables, is made there).
Must not know: timing, requests, the runtime's executors (the family's AR executor calls the same two
functions).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any, Callable

import torch

from v2.bench.launches import counted
from v2.families.qwen3_tts.shapes import SHAPES
from v2.models.qwen3_tts.config import Qwen3TTSConfig, Qwen3TTSSampling
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.models.qwen3_tts.sampling import Qwen3TTSSamplingTensors
from v2.models.weights import empty_model

SIZES = {"1.7b": "qwen3_tts_12hz_1_7b.json", "0.6b": "qwen3_tts_12hz_0_6b.json"}
BLOCK_SIZE = 16  # talker KV rows per block (as the shipped cards)


def release_model(size: str) -> Qwen3TTS:
    """The release-shaped model on the meta device in bf16 (shapes only)."""
    config = json.loads(SHAPES.joinpath(SIZES[size]).read_text())
    return empty_model(Qwen3TTS, Qwen3TTSConfig.from_dict(config)).to(torch.bfloat16)


def _inputs(model: Qwen3TTS, bucket: int, context: int) -> dict[str, Any]:
    """A frame step's staged inputs for `bucket` rows at mixed positions below `context` (release sampling)."""
    dev, dtype, cfg = model.device, model.dtype, model.cfg
    h, v = cfg.talker.hidden_size, cfg.talker.vocab_size
    width = -(-context // BLOCK_SIZE)  # blocks per row
    long: dict[str, Any] = dict(dtype=torch.long, device=dev)
    return dict(
        cache=model.allocate_paged_kv(bucket * width, BLOCK_SIZE),
        tables=torch.arange(bucket * width, device=dev).view(bucket, width),  # [B, W]
        cp_cache=model.talker.code_predictor.allocate_kv(bucket, dtype=dtype, device=dev),
        s=Qwen3TTSSamplingTensors.build([Qwen3TTSSampling()] * bucket, list(range(bucket)), dev),
        positions=torch.tensor([(37 * i) % (context - 64) + 32 for i in range(bucket)], device=dev),
        hidden=torch.empty(bucket, h, dtype=dtype, device=dev), text=torch.empty(bucket, h, dtype=dtype, device=dev),
        c0=torch.empty(bucket, **long), frame=torch.empty(bucket, **long), after=torch.empty(bucket, **long),
        valid=torch.ones(bucket, dtype=torch.bool, device=dev), seen=torch.empty(bucket, v, dtype=torch.bool, device=dev),
        cp_logits=torch.empty(bucket, cfg.code_predictor.codebook_size, dtype=torch.float32, device=dev),
        logits=torch.empty(bucket, v, dtype=torch.float32, device=dev))


def _counted(fn: Callable[[], Any], use_kernels: bool) -> Counter[str]:
    return counted(fn, use_kernels)  # after one warm-up call: what a step makes once per device is made there


def count(model: Qwen3TTS, bucket: int, context: int, use_kernels: bool) -> dict[str, Counter[str]]:
    """Launches of one frame step and of its pieces, each the model layer's own call: "step" (`frame_step` +
    `choose`), "predictor" (`predict_codes`: the code predictor with its G-1 draws), "draws" (those G-1
    draws alone, `FrameDraws.code`), "choose" (group 0's rule and draw)."""
    x = _inputs(model, bucket, context)
    s, g = x["s"], model.num_code_groups

    def step() -> None:
        out = model.frame_step(x["hidden"], x["c0"], x["text"], s, x["frame"], x["cache"], x["tables"], x["positions"],
                               valid=x["valid"], context_len=context, cp_cache=x["cp_cache"], return_logits=False)
        model.choose(out.logits, s, x["after"], seen=x["seen"], allow_eos=x["valid"])

    def draws() -> None:
        d = model.draws(s, x["frame"], groups=list(range(1, g)))
        for group in range(1, g):
            d.code(group, x["cp_logits"])

    return {"step": _counted(step, use_kernels), "draws": _counted(draws, use_kernels),
            "predictor": _counted(lambda: model.predict_codes(x["hidden"], x["c0"], s, x["frame"], valid=x["valid"],
                                                              cache=x["cp_cache"], return_logits=False), use_kernels),
            "choose": _counted(lambda: model.choose(x["logits"], s, x["after"], seen=x["seen"], allow_eos=x["valid"]),
                               use_kernels)}


def bucket_row(model: Qwen3TTS, bucket: int, context: int) -> dict[str, Any]:
    """One bucket's launches with the torch forms and with the Triton kernels: totals, every kernel of the step
    by name (`*_ops`, most first), and the step split into the talker (frame row, one decode row, group-0
    logits), the code predictor (its G-1 steps) and sampling (G-1 draws and group 0's choice)."""
    row: dict[str, Any] = {"bucket": bucket}
    for label, on in (("torch", False), ("kernels", True)):
        counts = count(model, bucket, context, on)
        n = {k: sum(c.values()) for k, c in counts.items()}
        row[f"{label}_launches"] = n["step"]
        row[f"{label}_parts"] = {"talker": n["step"] - n["predictor"] - n["choose"],
                                 "code_predictor": n["predictor"] - n["draws"], "sampling": n["draws"] + n["choose"]}
        row[f"{label}_ops"] = dict(counts["step"].most_common())
        if on:
            row["triton"] = {k.split(":", 1)[1]: v for k, v in sorted(counts["step"].items()) if k.startswith("triton:")}
    return row


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", choices=sorted(SIZES, reverse=True), nargs="+", default=sorted(SIZES, reverse=True),
                        help="the release sizes (default: both)")


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each of `args.buckets` at each of `args.size` (`bucket_row`, with its size); the per-kernel table goes to
    stderr."""
    rows = []
    for size in args.size:
        model = release_model(size)
        for bucket in args.buckets:
            row = {"size": size, **bucket_row(model, bucket, args.context)}
            rows.append(row)
            print(f"size={size} bucket={bucket} torch={row['torch_launches']} {row['torch_parts']} "
                  f"kernels={row['kernels_launches']} {row['kernels_parts']}", file=sys.stderr)
            for name, n in row["kernels_ops"].items():
                print(f"  {name:<28} {n:>6}", file=sys.stderr)
    return {"sizes": list(args.size)}, rows
