"""`python -m v2.models.forced_aligner.bench`: the forced aligner's time per second of audio on this machine's
CPU, by part; one JSON line last.

Owns: the timing of what the aligner kind does for a batch of spans (`v2.aligner.executor`): resampling the
family's audio to 16 kHz (soxr "HQ", from `--rate`), the log-mel and prompt per clip, the audio encoder, and
the decoder with the head and the argmax (`marker_logits` less the encoder), for `--batch` clips of
`--seconds` each; the best of `--repeat` runs (the machine may be shared) in wall seconds and in this
process's CPU seconds, each per second of audio. `--dims release`: Qwen3-ForcedAligner-0.6B's dimensions
(`launches.release_config`) with random float32 weights (about 3.6 GB); `--dims tiny`: the
`forced_aligner_tiny` card's seeded model. The exact CPU forms run (what the runtime runs on a CPU).
Must not know: requests, the runtime's engine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

import numpy as np
import torch

from v2.bench.threads import keeps_threads
from v2.models.audio_in import resample
from v2.models.forced_aligner.align import prompt_ids
from v2.models.forced_aligner.features import audio_tokens, clip_features
from v2.models.forced_aligner.launches import clip_inputs, random_model, release_config
from v2.models.forced_aligner.model import ForcedAligner

RATE = 16000


def build(dims: str) -> ForcedAligner:
    if dims == "release":
        return random_model(release_config())
    from v2.aligner.card import resolve_aligner
    from v2.aligner.service import Aligner

    return Aligner.load(resolve_aligner("forced_aligner_tiny"), "cpu").model


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds of this process) of `repeat` calls."""
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


@torch.no_grad()
def measure(model: ForcedAligner, seconds: float, batch: int, rate: int, repeat: int) -> dict[str, Any]:
    cfg = model.cfg
    clips = [clip_inputs(seconds, seed=i) for i in range(batch)]
    family = [resample(w.numpy()[None], RATE, rate)[0] for w, _ in clips]  # the family's audio [n] at `rate`
    mels = [clip_features(w, cfg.audio) for w, _ in clips]  # [mel, T] each
    prompts = [torch.tensor(prompt_ids(ids, audio_tokens(m.shape[1], cfg.audio), cfg.ids))
               for (_, ids), m in zip(clips, mels)]

    def features() -> None:
        for (wave, ids) in clips:
            mel = clip_features(wave, cfg.audio)
            torch.tensor(prompt_ids(ids, audio_tokens(mel.shape[1], cfg.audio), cfg.ids))

    def whole() -> None:
        torch.cat([lg.argmax(-1) for lg in model.marker_logits(prompts, mels)])

    whole()  # warm up (aligned weight copies are made once)
    audio = seconds * batch
    parts = {"resample": _best(lambda: [resample(a[None], rate, RATE) for a in family], repeat),
             "features": _best(features, repeat),
             "encoder": _best(lambda: model.encode(mels), repeat)}
    total = _best(whole, repeat)
    parts["decoder"] = (max(0.0, total[0] - parts["encoder"][0]), max(0.0, total[1] - parts["encoder"][1]))
    wall = sum(w for w, _ in parts.values())
    cpu = sum(c for _, c in parts.values())
    return {"seconds": seconds, "batch": batch, "tokens_per_clip": int(prompts[0].shape[0]),
            "wall_s_per_audio_s": wall / audio, "cpu_s_per_audio_s": cpu / audio,
            "parts_wall_s_per_audio_s": {k: w / audio for k, (w, _) in parts.items()},
            "parts_cpu_s_per_audio_s": {k: c / audio for k, (_, c) in parts.items()},
            "load_avg_1min": os.getloadavg()[0]}


@keeps_threads
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.models.forced_aligner.bench", description=__doc__.splitlines()[0])
    p.add_argument("--dims", choices=["release", "tiny"], default="release",
                   help="release: Qwen3-ForcedAligner-0.6B's sizes, random weights; tiny: the tiny card (default: %(default)s)")
    p.add_argument("--seconds", type=float, nargs="+", default=[5.0], help="audio seconds per clip (default: 5)")
    p.add_argument("--batch", type=int, default=1, help="clips per forward (default: %(default)s)")
    p.add_argument("--rate", type=int, default=24000, help="the family's sample rate, resampled from (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=3, help="runs per part, the best kept (default: %(default)s)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = p.parse_args(argv)
    if min(args.seconds) < 0.5 or args.batch < 1 or args.repeat < 1 or args.rate < 1:
        p.error("--seconds >= 0.5, --batch, --repeat and --rate >= 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    model = build(args.dims)
    rows = [measure(model, s, args.batch, args.rate, args.repeat) for s in args.seconds]
    for r in rows:
        print(f"{r['seconds']:>5.1f} s x {r['batch']}: {r['wall_s_per_audio_s']:.3f} wall s / audio s, "
              f"{r['cpu_s_per_audio_s']:.3f} CPU s / audio s (" + ", ".join(
                  f"{k} {v:.3f}" for k, v in r["parts_cpu_s_per_audio_s"].items()) + f"); load {r['load_avg_1min']:.1f}",
              file=sys.stderr)
    print(json.dumps({"bench": "forced_aligner.bench", "dims": args.dims, "dtype": "float32", "device": "cpu",
                      "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "torch": torch.__version__,
                      "load_avg_1min_before": load_before, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
