"""`python -m v2.families.qwen3_tts.bench.framestep`: the Qwen3-TTS talker executor's frame step per batch bucket,
eager and replayed from a CUDA graph, and whether the two agree.

Owns: timing the runtime's own frame step (`TalkerExecutor.frame_step`: group 0's draw, the code predictor's
G-1 steps and draws, the frame row, one talker decode row through the paged KV) on static inputs, rows at
mixed positions with the release's sampling, each slot's blocks scattered over the pool: eager, and on CUDA
replayed from one graph per bucket, with `graph_equals_eager` (one step from the same state both ways gives
the same packed result, bit for bit); one JSON line last. Default on CUDA: the release's dimensions (`--size`)
with random weights in bf16; elsewhere the tiny card's seeded model (eager only).
Must not know: requests, scheduling.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from v2.bench.__main__ import machine
from v2.bench.framestep_kit import graph_bucket_row, say_row, scatter_blocks
from v2.card import load_card
from v2.families.qwen3_tts.bench.launches import SIZES
from v2.families.qwen3_tts.card import Qwen3Card
from v2.families.qwen3_tts.shapes import SHAPES
from v2.families.qwen3_tts.talker_executor import TalkerExecutor
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.kit.sequence import FramePlan
from v2.bench.threads import keeps_threads

BLOCK_SIZE = 16


def model_for(size: str | None, device: torch.device) -> Qwen3TTS:
    """The release's dimensions (random weights, bf16), or the tiny card's seeded model when `size` is None."""
    if size is None:
        card = load_card("qwen3_tts_tiny")
        assert isinstance(card, Qwen3Card)
        seeded = card.seeded["tts"]
        return Qwen3TTS.from_seed(seeded.config, seeded.seed, device=device)
    config = json.loads(SHAPES.joinpath(SIZES[size]).read_text())
    return Qwen3TTS.from_seed(config, 0, dtype=torch.bfloat16, device=device, init_device=device)


def executor(model: Qwen3TTS, slots: int, context: int, buckets: list[int], *, graphs: bool = False,
             settings: list[Qwen3TTSSampling] | None = None) -> TalkerExecutor:
    """A bare executor whose slots hold admitted requests (`settings` in turn, default the release sampling), a
    random talker state and a full table of blocks of their own, scattered over the pool (as a long-running
    pool's are; written after any graph capture, as the runtime writes tables between replays)."""
    width = -(-context // BLOCK_SIZE)
    ex = TalkerExecutor(model, num_slots=slots, max_len=context, batch_buckets=buckets, num_blocks=slots * width,
                        block_size=BLOCK_SIZE, graphs=graphs)
    scatter_blocks(ex, slots, width)
    g = torch.Generator().manual_seed(1)
    settings = settings or [Qwen3TTSSampling()]
    for slot in range(slots):
        ex.admit_host(slot, settings[slot % len(settings)])
        ex.admit_device(slot, settings[slot % len(settings)], 11 + slot, None)
        ex.hidden[slot] = torch.randn(model.cfg.talker.hidden_size, generator=g).to(ex.hidden)
    return ex


def state(ex: TalkerExecutor) -> list[torch.Tensor]:
    """What a frame step writes: the talker's state, the penalty sets, the KV pool."""
    return [ex.hidden, ex.seen, ex.kv.k, ex.kv.v]


def bucket_row(ex: TalkerExecutor, bucket: int, context: int, iters: int, device: torch.device) -> dict[str, Any]:
    """One bucket: eager ms, and on CUDA graph ms and whether a replay equals an eager step from the same state."""
    pad = ex.model.cfg.text.tts_pad
    plans = [FramePlan(i, (37 * i) % (context - 64) + 32, 5, True, feed=pad) for i in range(bucket)]  # mixed positions
    key = ex.graph_key(bucket, ex.stage(plans, bucket))
    return graph_bucket_row(ex.frame_step, key, bucket, lambda: state(ex), iters, device)


@keeps_threads
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.families.qwen3_tts.bench.framestep",
                                description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", choices=sorted(SIZES, reverse=True), default="1.7b",
                   help="the release size (on CUDA; elsewhere the tiny card)")
    p.add_argument("--buckets", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--context", type=int, default=512, help="KV length per slot; rows sit at mixed positions below it")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args(argv)
    if args.context <= 64:
        p.error("--context must exceed 64 (rows sit at mixed positions from 32 up)")
    device = torch.device(args.device)
    size = args.size if device.type == "cuda" else None
    if device.type == "cpu":
        torch.set_num_threads(1)
    model = model_for(size, device)
    buckets = sorted(args.buckets)
    ex = executor(model, buckets[-1], args.context, buckets)
    with torch.no_grad():
        rows = [say_row(bucket_row(ex, bucket, args.context, args.iters, device)) for bucket in buckets]
    print(json.dumps({"bench": "v2.qwen3_tts.framestep", "dims": f"release {size} (random weights, bf16)" if size
                      else "tiny card (seeded, float32)", "context": args.context, "machine": machine(args.device),
                      "buckets": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
