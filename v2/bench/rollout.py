"""`python -m v2.bench.rollout --replicas 1 2`: rollout throughput on one runtime in this process and on Ray
pools of N replicas, in one run; one JSON line last.

Owns: the workload (P prompts x n samples, every sample forced to exactly `--frames` frames, so each
configuration does the same work), timing it after a warm-up rollout, and the figures: trajectories/s,
frames/s, the speed-up over one replica, the pool's start-up time, and the weight path's transport (pack +
one `ray.put` of `--weights-gb` of bf16, then a worker reading it back as tensors: what `update_weights`
moves before each replica's in-place copy). Ray is imported only here, in main.
Must not know: the runtime's or the pool's internals.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from datetime import date
from typing import Any

from v2.bench.__main__ import machine
from v2.card import DEFAULT_CARD, load_card
from v2.runtime import Runtime

PROMPT = "Rollout benchmark prompt number {i}, long enough to be a real sentence."


def timed(engine: Any, args: argparse.Namespace) -> dict[str, float]:
    """The best of `--repeat` rollouts of the workload after one warm-up, with the machine's 1-minute load
    average before and after (on a shared machine, other processes' load decides more than the pool does)."""
    load = os.getloadavg()[0]
    prompts = [PROMPT.format(i=i) for i in range(args.prompts)]
    options = dict(n=args.n, max_frames=args.frames, min_frames=args.frames)
    engine.rollout(prompts[: max(1, len(prompts) // 4)], seed=99, **options).trajectories(600)
    best: dict[str, Any] | None = None
    for r in range(args.repeat):
        start = time.perf_counter()
        got = engine.rollout(prompts, seed=r, **options).trajectories(600)
        wall = time.perf_counter() - start
        frames = sum(len(t.codes) for t in got)
        row = {"wall_s": round(wall, 3), "trajectories": len(got), "frames": frames,
               "trajectories_per_s": round(len(got) / wall, 2), "frames_per_s": round(frames / wall, 1)}
        if best is None or row["wall_s"] < best["wall_s"]:
            best = row
    assert best is not None
    best["load_1min"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    return best


def weight_transport(gb: float) -> dict[str, float]:
    """Seconds to pack + put `gb` GB of bf16 tensors, and for another process to read them as tensors."""
    import ray
    import torch

    from v2.cluster.weights import pack, unpack

    @ray.remote(num_cpus=0)
    def read(refs: list[Any]) -> float:
        start = time.perf_counter()
        tensors = unpack(ray.get(refs[0]))
        assert all(t.dtype == torch.bfloat16 for t in tensors.values())
        return time.perf_counter() - start

    per = int(gb * 2**30 / 2 / 16)  # 16 tensors of bf16
    named = {f"layer{i}.weight": torch.full((per,), float(i), dtype=torch.bfloat16) for i in range(16)}
    ray.get(read.remote([ray.put(pack({"w": torch.zeros(1, dtype=torch.bfloat16)}))]))  # a warm worker
    start = time.perf_counter()
    ref = ray.put(pack(named))
    put = time.perf_counter() - start
    get = ray.get(read.remote([ref]))
    del ref
    return {"gb": gb, "pack_put_s": round(put, 3), "put_gb_per_s": round(gb / put, 2), "worker_read_s": round(get, 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench.rollout", description=__doc__.splitlines()[0])
    p.add_argument("--card", default=DEFAULT_CARD, help="the card to measure, a name or a path (default: %(default)s)")
    p.add_argument("--replicas", type=int, nargs="+", default=[1, 2], help="pool sizes to measure (default: 1 2)")
    p.add_argument("--prompts", type=int, default=16, help="prompts in the workload (default: %(default)s)")
    p.add_argument("--n", type=int, default=4, help="samples per prompt (default: %(default)s)")
    p.add_argument("--frames", type=int, default=60,
                   help="frames per trajectory (forced: min = max) (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=2,
                   help="runs per pool size; the best is reported (default: %(default)s)")
    p.add_argument("--cpus-per-replica", type=float, default=1.0,
                   help="Ray CPUs per replica without GPUs (default: %(default)s)")
    p.add_argument("--no-baseline", action="store_true", help="skip the runtime in this process")
    p.add_argument("--weights-gb", type=float, default=1.0,
                   help="gigabytes of weights whose transport is measured (0: skip) (default: %(default)s)")
    args = p.parse_args(argv)
    card = load_card(args.card)
    results: dict[str, Any] = {}
    if not args.no_baseline:
        with Runtime.from_card(card) as rt:
            results["in_process"] = timed(rt, args)
        print(json.dumps({"in_process": results["in_process"]}), file=sys.stderr)
    import ray

    from v2.cluster import RolloutPool

    if not ray.is_initialized():
        ray.init(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    gpus = ray.cluster_resources().get("GPU", 0) > 0
    resources = {"num_gpus": 1} if gpus else {"num_cpus": args.cpus_per_replica}
    for n in args.replicas:
        start = time.perf_counter()
        with RolloutPool.from_card(card, replicas=n, resources_per_replica=resources) as pool:
            startup = time.perf_counter() - start
            row = timed(pool, args)
            row["startup_s"] = round(startup, 2)
        results[f"replicas_{n}"] = row
        print(json.dumps({f"replicas_{n}": row}), file=sys.stderr)
    if args.weights_gb > 0:
        results["weight_transport"] = weight_transport(args.weights_gb)
        print(json.dumps({"weight_transport": results["weight_transport"]}), file=sys.stderr)
    base = results.get(f"replicas_{min(args.replicas)}")
    for n in args.replicas:
        if base:
            results[f"replicas_{n}"]["speedup_vs_fewest"] = round(
                results[f"replicas_{n}"]["trajectories_per_s"] / base["trajectories_per_s"], 2)
    info = machine("cuda" if gpus else "cpu")
    info["ray"] = ray.__version__
    print(json.dumps({"bench": "rollout", "date": date.today().isoformat(), "card": card.name,
                      "workload": {"prompts": args.prompts, "n": args.n, "frames": args.frames,
                                   "resources_per_replica": resources},
                      "results": results, "machine": info, "cpus": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
