"""`python -m v2.families.csm.bench.framestep`: the CSM frame executor's frame step per batch bucket, eager and
replayed from a CUDA graph, and whether the two agree.

Owns: timing the runtime's own frame step (`FrameExecutor.frame_step`: codebook 0's draw, the depth decoder's N-1
steps and draws, the frame's audio row, one backbone decode row through the paged KV) on static inputs, rows at
mixed positions with the release's assumed sampling, each slot's blocks scattered over the pool: eager, and on CUDA
replayed from one graph per bucket, with `graph_equals_eager` (one step from the same state both ways gives the
same packed result and state, bit for bit); one JSON line last. Default on CUDA: the release's dimensions
(`launches.RELEASE`) with random weights in bf16, drawn on the device; elsewhere the tiny card's seeded model (eager).
Must not know: requests, scheduling.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from typing import Any

import torch

from v2.bench.__main__ import machine
from v2.bench.framestep_kit import graph_bucket_row, say_row, scatter_blocks
from v2.card import load_card
from v2.families.csm.bench.launches import RELEASE, SAMPLING
from v2.families.csm.card import CsmCard, config_dict, model_source, seeded
from v2.families.csm.frame_executor import FrameExecutor
from v2.models.csm.config import CsmConfig
from v2.models.csm.model import Csm
from v2.models.weights import empty_model
from v2.kit.sequence import FramePlan
from v2.bench.threads import keeps_threads

BLOCK_SIZE = 16


@torch.no_grad()
def release_model(device: torch.device) -> Csm:
    """The release's dimensions in bf16 with random weights drawn on `device` (matrices ~ N(0, 1 / fan_in), norm
    scales ~ 1 + N(0, 0.02)): for timing only."""
    model = empty_model(Csm, CsmConfig.from_dict(copy.deepcopy(RELEASE))).to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    for name, p in sorted(model.named_parameters()):
        if p.dim() >= 2:
            fan_in = p.shape[1] if name == "depth_decoder.codebooks_head.weight" else p.shape[-1]
            p.normal_(0.0, fan_in ** -0.5, generator=gen)
        else:
            p.normal_(1.0, 0.02, generator=gen)
    return model.to(torch.bfloat16).eval()


def tiny_model(device: torch.device) -> Csm:
    """The csm_tiny card's seeded model (float32)."""
    card = load_card("csm_tiny")
    assert isinstance(card, CsmCard)
    return Csm.from_seed(config_dict(card), seeded(card, model_source(card)).seed, device=device)


def executor(model: Csm, slots: int, context: int, buckets: list[int], *, graphs: bool = False) -> FrameExecutor:
    """A bare executor whose slots hold admitted requests (the release's sampling), a random backbone state and a
    full table of blocks of their own, scattered over the pool (as a long-running pool's are)."""
    width = -(-context // BLOCK_SIZE)
    ex = FrameExecutor(model, num_slots=slots, max_len=context, batch_buckets=buckets, num_blocks=slots * width,
                       block_size=BLOCK_SIZE, graphs=graphs)
    scatter_blocks(ex, slots, width)
    g = torch.Generator().manual_seed(1)
    for slot in range(slots):
        ex.admit_host(slot, SAMPLING)
        ex.admit_device(slot, SAMPLING, 11 + slot)
        ex.hidden[slot] = torch.randn(model.cfg.hidden_size, generator=g).to(ex.hidden)
    return ex


def state(ex: FrameExecutor) -> list[torch.Tensor]:
    """What a frame step writes: the backbone's state, the KV pool, the depth decoder's per-frame cache."""
    return [ex.hidden, ex.kv.k, ex.kv.v, ex.depth_cache.k, ex.depth_cache.v]


def bucket_row(ex: FrameExecutor, bucket: int, context: int, iters: int, device: torch.device) -> dict[str, Any]:
    """One bucket: eager ms, and on CUDA graph ms and whether a replay equals an eager step from the same state."""
    plans = [FramePlan(i, (37 * i) % (context - 64) + 32, 5, True) for i in range(bucket)]  # mixed positions
    key = ex.graph_key(bucket, ex.stage(plans, bucket))
    return graph_bucket_row(ex.frame_step, key, bucket, lambda: state(ex), iters, device)


@keeps_threads
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.families.csm.bench.framestep", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--buckets", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--context", type=int, default=512, help="KV length per slot; rows sit at mixed positions below it")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args(argv)
    if args.context <= 64:
        p.error("--context must exceed 64 (rows sit at mixed positions from 32 up)")
    device = torch.device(args.device)
    release = device.type == "cuda"
    if not release:
        torch.set_num_threads(1)
    model = release_model(device) if release else tiny_model(device)
    buckets = sorted(args.buckets)
    ex = executor(model, buckets[-1], args.context, buckets)
    with torch.no_grad():
        rows = [say_row(bucket_row(ex, bucket, args.context, args.iters, device)) for bucket in buckets]
    print(json.dumps({"bench": "v2.csm.framestep", "dims": "release (random weights, bf16)" if release
                      else "tiny card (seeded, float32)", "context": args.context, "machine": machine(args.device),
                      "buckets": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
