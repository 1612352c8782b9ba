"""`python -m v2.families.moss_tts_local.bench.framestep`: the AR frame step per batch bucket, eager vs CUDA
graph vs torch.compile.

Owns: timing the runtime's own frame step (`ARExecutor.frame_step`: backbone decode step, 13 local
micro-steps, 13 seeded samplings with logprobs, the next feedback embedding) on static inputs with rows
at mixed positions: eager, replayed from one CUDA graph per bucket, and under
`torch.compile(mode="reduce-overhead")` as the side-by-side baseline; one JSON line last.
Default: the release's dimensions with random weights on CUDA; the tiny card (eager only) on CPU.
Must not know: requests, scheduling.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from v2.bench.__main__ import machine
from v2.bench.framestep_kit import say_row, timed
from v2.families.moss_tts_local.bench.kv import spread_blocks
from v2.families.moss_tts_local.shapes import SHAPES
from v2.card import build_model, load_card
from v2.families.moss_tts_local.ar_decode import FramePlan
from v2.models.kernels import decode_attention as da
from v2.models.kernels import kernels_on
from v2.models.moss_tts_local.model import MossTTSLocal
from v2.sampling_settings import SamplingSettings
from v2.families.moss_tts_local.ar_executor import ARExecutor
from v2.runtime.graphs import StepGraphs


def attention_row(model: MossTTSLocal, bucket: int, context: int, iters: int) -> dict[str, Any]:
    """One layer's decode attention for `bucket` rows, one at the full context and the rest at 64 keys:
    the kernel (reads each row's length) vs the gather + masked SDPA over the context bucket, in microseconds."""
    cfg, dev = model.cfg.backbone, model.device
    k = torch.randn(bucket + 1, cfg.num_kv_heads, context, cfg.head_dim, device=dev).to(model.dtype)
    v = torch.randn_like(k)
    q = torch.randn(bucket, cfg.num_heads, cfg.head_dim, device=dev).to(model.dtype)
    slots = torch.arange(bucket, device=dev)
    lengths = torch.full((bucket,), 64, device=dev)
    lengths[0] = context
    row: dict[str, Any] = {"bucket": bucket, "context": context, "lengths": "one at context, rest at 64"}
    for name, fn in (("kernel_us", da.decode_attention), ("sdpa_us", da.decode_attention_reference)):
        row[name] = timed(lambda: fn(q, k, v, slots, lengths, context), iters, dev) * 1e3
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.families.moss_tts_local.bench.framestep",
                                description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="the tiny card instead of the release's dimensions")
    p.add_argument("--buckets", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--context", type=int, default=512, help="KV length per slot; rows sit at mixed positions below it")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    args = p.parse_args(argv)
    if args.context <= 64:
        p.error("--context must exceed 64 (rows sit at mixed positions from 32 up)")
    device = torch.device(args.device)
    tiny = args.tiny or device.type != "cuda"
    if tiny:
        model = build_model(load_card("moss_tts_local_tiny"), device=device)
    else:
        config = json.loads(SHAPES.joinpath("moss_tts_local_v1_5.json").read_text())
        model = MossTTSLocal.from_seed(config, 0, dtype=torch.bfloat16, device=device, init_device=device)
    slots = max(args.buckets)
    ex = ARExecutor(model, num_slots=slots, max_len=args.context, batch_buckets=sorted(args.buckets), graphs=False)
    spread_blocks(ex)  # each row's KV in blocks of its own, scattered over the pool
    for slot in range(slots):
        ex.admit(slot, SamplingSettings(), seed=slot)
    rows = []
    for bucket in args.buckets:
        plans = [FramePlan(i, (37 * i) % (args.context - 64) + 32, 5, True) for i in range(bucket)]  # mixed positions
        key = ex.graph_key(bucket, ex.stage(plans, bucket))
        row: dict[str, Any] = {"bucket": bucket, "context_bucket": key[1],
                               "eager_ms": timed(lambda: ex.frame_step(key), args.iters, device)}
        if device.type == "cuda":
            graphs = StepGraphs("bench", ex.frame_step, [key], device=device, enabled=True)
            graphs.capture()
            row["graph_ms"] = timed(lambda: graphs.run(key), args.iters, device)
            row["frames_per_s"] = bucket / row["graph_ms"] * 1e3
            if not args.no_compile:
                compiled = torch.compile(ex.frame_step, mode="reduce-overhead")
                try:
                    row["compile_reduce_overhead_ms"] = timed(lambda: compiled(key), args.iters, device)
                except Exception as e:  # report, do not hide, a baseline that does not run
                    row["compile_reduce_overhead_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        else:
            row["frames_per_s"] = bucket / row["eager_ms"] * 1e3
        rows.append(say_row(row))
    attention = []
    if kernels_on(device):
        for bucket in (1, 16, 64):
            attention.append(attention_row(model, bucket, 4096, 5 * args.iters))
            print(" ".join(f"{k}={v}" for k, v in attention[-1].items()), file=sys.stderr)
    print(json.dumps({"bench": "v2.framestep", "dims": "tiny" if tiny else "release (random weights)",
                      "context": args.context, "machine": machine(args.device), "buckets": rows,
                      "decode_attention": attention}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
