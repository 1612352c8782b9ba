"""`python -m v2.families.qwen3_tts.bench.frames CHECKPOINT`: Qwen3-TTS frames per second through the reference
loop.

Owns: timing `qwen3_tts.generate_batch` (one talker row and G-1 code-predictor steps per frame, the release's
sampling defaults, EOS masked so every row runs the whole budget) at a few batch sizes on a checkpoint's
first prompt-sized input; one JSON line last. Default: the tiny fixture on CPU with one intra-op thread.
Must not know: requests, scheduling, the runtime.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from v2.bench.__main__ import machine
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.generate import generate_batch
from v2.models.qwen3_tts.model import Qwen3TTS
from v2.bench.threads import keeps_threads

FIXTURE = Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "qwen3_tts_tiny" / "checkpoint"


@keeps_threads
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("checkpoint", nargs="?", default=str(FIXTURE))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model = Qwen3TTS.from_pretrained(args.checkpoint, device=args.device)
    result: dict = {"load_s": round(time.perf_counter() - start, 3), "frames": args.frames}
    prompt = model.embed_text(torch.arange(1000, 1024))  # a 24-row prompt of arbitrary text rows
    trailing = model.embed_text(torch.arange(2000, 2008))
    for b in args.batches:
        run = lambda n: generate_batch(model, [prompt] * b, [trailing] * b, [Qwen3TTSSampling()] * b,  # noqa: E731
                                       list(range(b)), max_new_tokens=n + 1, min_new_tokens=n + 1)
        run(2)  # warm-up
        t = time.perf_counter()
        run(args.frames)
        ms = (time.perf_counter() - t) / args.frames * 1000
        result[f"ms_per_frame_b{b}"] = round(ms, 2)
        result[f"frames_per_s_b{b}"] = round(b * 1000 / ms, 1)
    result["machine"] = machine(args.device)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
