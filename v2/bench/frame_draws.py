"""The host frame sampler's draws alone, at the shipped frame shapes: ms per frame (setup + every group's draw).

`python -m v2.bench.frame_draws [--against PATH] [--repeat N] [--frames F] [--batches 1 16]` prints JSON: per
frame shape (`wide`: 32 x 2,051 ids, T 0.9, top-k 50, exact logprobs; `small`: 2 + 12 x 1,024, T 1.7, top-k 25,
top-p 0.8; `mixed`: 3,072 + 15 x 2,048, T 0.9, top-k 50, exact logprobs) and batch, the median ms per frame over
`--repeat` runs of `--frames` frames of fixed `randn * 3` logits, one torch thread. The shapes are the shipped
cards' frames (designs/perf.md names them).
`--against PATH` loads another copy of v2/models/frame_sampler.py (e.g. `git show HEAD~1:...` saved to a file),
checks that its ids and logprobs equal this tree's bit for bit, and alternates the two run by run (A/B).
Must not know: the models that make the logits, the runtime, requests.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from dataclasses import dataclass
from types import ModuleType

import torch
from torch import Tensor

from v2.bench.threads import keeps_threads
from v2.models import frame_sampler

# frame shape -> (vocabularies [G], (temperature, top_k, top_p) per group, exact logprobs, raw greedy logprobs)
SHAPES: dict[str, tuple[list[int], list[tuple[float, int, float]], bool, bool]] = {
    "wide": ([2051] * 32, [(0.9, 50, 1.0)] * 32, True, True),
    "small": ([2] + [1024] * 12, [(1.0, 50, 1.0)] + [(1.7, 25, 0.8)] * 12, False, False),
    "mixed": ([3072] + [2048] * 15, [(0.9, 50, 1.0)] * 16, True, False),
}


@dataclass
class Settings:
    """`frame_sampler.GroupSettings`: temperature / top_k / top_p [B, G], seed [B]."""

    temperature: Tensor
    top_k: Tensor
    top_p: Tensor
    seed: Tensor


@dataclass
class Case:
    settings: Settings
    vocabs: list[int]
    exact: bool
    raw: bool
    frames: list[list[Tensor]]  # per frame, per group: logits [B, V]


def case(shape: str, batch: int, frames: int) -> Case:
    vocabs, per_group, exact, raw = SHAPES[shape]
    s = Settings(torch.tensor([[t for t, _, _ in per_group]] * batch, dtype=torch.float32),
                 torch.tensor([[k for _, k, _ in per_group]] * batch, dtype=torch.int64),
                 torch.tensor([[p for _, _, p in per_group]] * batch, dtype=torch.float32),
                 torch.arange(batch, dtype=torch.int64) * 7919 + 11)
    gen = torch.Generator().manual_seed(batch * 31 + len(vocabs))
    logits = [[torch.randn(batch, v, generator=gen) * 3 for v in vocabs] for _ in range(frames)]
    return Case(s, vocabs, exact, raw, logits)


def run(module: ModuleType, c: Case) -> list[tuple[Tensor, Tensor]]:
    """Every frame's draws through `module.FrameSampler`: (ids [B], logprobs [B]) per group, frame by frame."""
    out: list[tuple[Tensor, Tensor]] = []
    for f, frame in enumerate(c.frames):
        steps = torch.full((c.settings.seed.shape[0],), f + 3, dtype=torch.int64)
        sampler = module.FrameSampler(c.settings, steps, c.vocabs, exact_logprobs=c.exact,
                                      raw_greedy_logprobs=[c.raw] * len(c.vocabs))
        out.extend(sampler.draw(g, logits) for g, logits in enumerate(frame))
    return out


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("frame_sampler_against", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"--against: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same(a: list[tuple[Tensor, Tensor]], b: list[tuple[Tensor, Tensor]]) -> bool:
    return all(torch.equal(i, j) and torch.equal(x.view(torch.int32), y.view(torch.int32))
               for (i, x), (j, y) in zip(a, b))


@keeps_threads
def main(argv: list[str] | None = None) -> dict[str, dict[str, float | bool]]:
    p = argparse.ArgumentParser(prog="python -m v2.bench.frame_draws", description=__doc__.split("\n")[0])
    p.add_argument("--against", help="another frame_sampler.py to A/B against, bits checked first "
                   "(default: none, this one alone)")
    p.add_argument("--repeat", type=int, default=9, help="runs per side (default: %(default)s)")
    p.add_argument("--frames", type=int, default=4, help="frames a run (default: %(default)s)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16], help="batch sizes (default: 1 16)")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.frames < 1 or min(args.batches) < 1:
        raise SystemExit("--repeat, --frames and --batches must be at least 1")
    torch.set_num_threads(1)
    sides: dict[str, ModuleType] = {"ms": frame_sampler}
    if args.against:
        sides["against_ms"] = load(args.against)
    report: dict[str, dict[str, float | bool]] = {}
    for shape in SHAPES:
        for batch in args.batches:
            c = case(shape, batch, args.frames)
            runs = {name: run(m, c) for name, m in sides.items()}
            times: dict[str, list[float]] = {name: [] for name in sides}
            for r in range(args.repeat):
                for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):  # alternated
                    t0 = time.perf_counter()
                    run(sides[name], c)
                    times[name].append((time.perf_counter() - t0) / args.frames * 1e3)
            row: dict[str, float | bool] = {name: round(statistics.median(t), 3) for name, t in times.items()}
            if args.against:
                row["same_bits"] = same(runs["ms"], runs["against_ms"])
                row["ratio"] = round(float(row["ms"]) / float(row["against_ms"]), 3)
            report[f"{shape}_b{batch}"] = row
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
