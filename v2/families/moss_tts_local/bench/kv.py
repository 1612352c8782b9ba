"""`python -m v2.families.moss_tts_local.bench.kv`: paged KV figures (capacity, time to first audio with a
cached voice prompt, the
frame step paged vs contiguous); one JSON line last.

Owns: (1) capacity at the release's dimensions by accounting alone: the pool is allocated on the meta
device (no memory) and the real `KVPager` is filled with requests of a typical length (a 300-row prompt
and 125 frames, 10 s of audio) until one more does not fit; contiguous slots of max_prompt_rows +
max_frames rows vs paged blocks per block size, with distinct prompts and with prompts that share a voice
prefix. (2) Time to first audio of streaming requests that share a 10 s voice prompt (`reference_codes`
of 125 frames), at concurrency 1 and 16, prefix cache on vs off (tiny card). (3) The runtime's frame step
(`ARExecutor.frame_step`) on the same static inputs with its KV in scattered 16-row blocks vs in one
contiguous slot per row, and one layer's decode attention at the release's head layout (torch paths; the
Triton kernels too on CUDA). Timings alternate the two sides and report medians (shared machines are noisy).
Must not know: the engine's internals beyond its public API and `stats()`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np
import torch

from v2.bench.__main__ import machine
from v2.families.moss_tts_local.shapes import SHAPES
from v2.card import build_model, load_card
from v2.families.moss_tts_local.card import MossCard
from v2.families.moss_tts_local.ar_decode import FramePlan
from v2.models.kernels import decode_attention as da
from v2.models.moss_tts_local.config import MossTTSLocalConfig
from v2.models.kernels import kernels_on
from v2.models.kv_cache import PagedKVCache
from v2.sampling_settings import SamplingSettings
from v2.runtime import Runtime
from v2.runtime.blocks import chain_keys
from v2.families.moss_tts_local.ar_executor import ARExecutor
from v2.runtime.paging import KVPager
from v2.bench.threads import keeps_threads

ROW_WIDTH = 13


# ----- (1) capacity -------------------------------------------------------------------------------
def _prompt(i: int, rows: int, shared: int) -> bytes:
    """Prompt i: its first `shared` rows are everyone's (a voice prefix), the rest its own."""
    data = np.zeros((rows, ROW_WIDTH), dtype=np.int64)
    data[:, 1] = np.arange(rows)
    data[shared:, 0] = i + 1
    return data.tobytes()


def fill(pager: KVPager, prompt: int, frames: int, shared: int) -> int:
    """Requests of `prompt` rows grown by `frames` rows, admitted one after another until the pool is dry."""
    n = 0
    while True:
        keys = chain_keys(_prompt(n, prompt, shared), ROW_WIDTH * 8, pager.block_size)
        if not pager.can_admit(keys, prompt):
            return n
        pager.admit(n, n, keys, prompt)
        pager.commit(n, prompt)
        if pager.grow([(n, prompt, prompt + frames)]):  # it did not fit: preempted (itself)
            return n
        n += 1


def capacity(budget: int, prompt: int, frames: int, voice: int, sizes: list[int]) -> dict[str, Any]:
    cfg = MossTTSLocalConfig.from_dict(json.loads(SHAPES.joinpath("moss_tts_local_v1_5.json").read_text())).backbone
    release = load_card("moss_tts_local_v1_5")
    assert isinstance(release, MossCard)
    card = release.loops.ar_decode
    max_len = card.max_prompt_rows + card.max_frames
    row_bytes = PagedKVCache.block_bytes(cfg, 1, torch.bfloat16)
    out: dict[str, Any] = {"budget_bytes": budget, "row_bytes": row_bytes, "request_rows": prompt + frames,
                           "rows_per_budget": budget // row_bytes, "slot_rows": max_len,
                           "contiguous": budget // (max_len * row_bytes),
                           "ideal": budget // ((prompt + frames) * row_bytes), "paged": []}
    for size in sizes:
        blocks = budget // PagedKVCache.block_bytes(cfg, size, torch.bfloat16) - 1  # and the dummy block
        pool = PagedKVCache.allocate(cfg, blocks, size, dtype=torch.bfloat16, device="meta")  # accounting only
        pool_bytes = 2 * pool.k.numel() * pool.k.element_size()  # K and V, dummy block included
        width = -(-max_len // size)
        distinct = fill(KVPager(blocks, size, max_blocks=width, watermark=0), prompt, frames, 0)
        shared = fill(KVPager(blocks, size, max_blocks=width, watermark=0), prompt, frames, voice)
        out["paged"].append({"block_size": size, "blocks": blocks, "pool_bytes": pool_bytes, "requests": distinct,
                             "requests_shared_voice": shared,
                             "rows_used_fraction": round(distinct * (prompt + frames) * row_bytes / budget, 4)})
        print(f"block {size}: {distinct} requests ({shared} with a shared {voice}-row voice prefix)", file=sys.stderr)
    return out


# ----- (2) time to first audio --------------------------------------------------------------------
def _runtime(cache: bool) -> Runtime:
    card = load_card("moss_tts_local_tiny")
    assert isinstance(card, MossCard)
    ar = card.loops.ar_decode.model_copy(update={"prefix_cache": cache})
    return Runtime.from_card(card.model_copy(update={"loops": card.loops.model_copy(update={"ar_decode": ar})}),
                             device="cpu")


def ttfa(rounds: int) -> dict[str, Any]:
    voice = np.random.default_rng(0).integers(0, 1024, (125, 12))
    texts = [f"Sentence number {i} in the shared voice, of a usual length." for i in range(16)]

    def ask(i: int) -> dict[str, Any]:
        return {"text": texts[i % 16], "reference_codes": voice, "seed": i, "max_frames": 8, "min_frames": 8,
                "stream": True}

    runtimes = {"on": _runtime(True), "off": _runtime(False)}
    samples: dict[str, dict[int, list[float]]] = {k: {1: [], 16: []} for k in runtimes}
    rows: dict[str, list[int]] = {k: [] for k in runtimes}
    try:
        for rt in runtimes.values():
            rt.submit(ask(99)).result(120)  # warm-up; with the cache on, the voice's blocks are now cached
        for _ in range(rounds):
            for key, rt in runtimes.items():  # alternate: both sides see the same machine load
                before = rt.stats()["prefilled_rows"]
                for i in range(8):
                    samples[key][1].append(rt.submit(ask(i)).result(120).metrics.ttfa_s)
                results = [h.result(120) for h in rt.submit_many([ask(i) for i in range(16)])]
                samples[key][16] += [r.metrics.ttfa_s for r in results]
                rows[key].append((rt.stats()["prefilled_rows"] - before) // 24)
        stats = {k: rt.stats() for k, rt in runtimes.items()}
    finally:
        for rt in runtimes.values():
            rt.close()
    out: dict[str, Any] = {"voice_frames": 125, "frames": 8, "rounds": rounds}
    for key in runtimes:
        for c in (1, 16):
            xs = sorted(samples[key][c])
            out[f"cache_{key}_c{c}_p50_ms"] = round(statistics.median(xs) * 1e3, 2)
            out[f"cache_{key}_c{c}_p90_ms"] = round(xs[int(0.9 * (len(xs) - 1))] * 1e3, 2)
        out[f"cache_{key}_prefilled_rows_per_request"] = statistics.median(rows[key])
        out[f"cache_{key}_hits"] = stats[key]["prefix_cache_hits"]
    return out


# ----- (3) the frame step and the attention, paged vs contiguous ----------------------------------
def alternate(fns: dict[str, Callable[[], Any]], rounds: int, iters: int,
              device: torch.device) -> dict[str, list[float]]:
    """Milliseconds per call of each function in each of `rounds` alternating rounds, after a warm-up. On a
    CPU the clock is this thread's CPU time (one intra-op thread: all the work is this thread's), which other
    processes on a shared machine disturb far less than wall time; on CUDA, wall time around a sync."""
    clock = time.perf_counter if device.type == "cuda" else time.thread_time
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for key, fn in fns.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = clock()
            for _ in range(iters):
                fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times[key].append((clock() - start) / iters * 1e3)
    return times


def paired(times: dict[str, list[float]], a: str, b: str) -> float:
    """The median over rounds of a's time over b's in the same round (neighbours in time see the same load)."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def spread_blocks(ex: ARExecutor, seed: int = 0) -> None:
    """Give every slot of a bare executor a full table of its own blocks, scattered over the pool (what a
    long-running pool looks like), as the runtime's block manager would before a step."""
    width = ex.tables.shape[1]
    slots = ex.tables.shape[0] - 1
    if ex.kv.num_blocks < slots * width:
        raise ValueError(f"{ex.kv.num_blocks} blocks cannot give {slots} slots {width} blocks each")
    order = torch.randperm(ex.kv.num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
    ex.apply([], [(s, i, order[s * width + i]) for s in range(slots) for i in range(width)])


def _frame_step(executor: ARExecutor, key: Any) -> Callable[[], Any]:
    return lambda: executor.frame_step(key)


def frame_step(bucket: int, max_len: int, rounds: int, iters: int) -> dict[str, Any]:
    model = build_model(load_card("moss_tts_local_tiny"))
    executors = {}
    for key in ("paged", "contiguous"):
        ex = ARExecutor(model, num_slots=bucket, max_len=max_len, batch_buckets=[bucket], graphs=False)
        for slot in range(bucket):
            ex.admit(slot, SamplingSettings(), seed=slot)
        executors[key] = ex
    contiguous = executors["contiguous"]
    spread_blocks(executors["paged"])
    contiguous.kv = model.allocate_kv(bucket, max_len)  # type: ignore[assignment]  # one slot per row
    contiguous.tables = torch.arange(bucket + 1)[:, None]  # slot s reads its own slot: a one-block table
    plans = [FramePlan(i, (37 * i) % (max_len - 64) + 32, 5, True) for i in range(bucket)]  # mixed positions
    keys = {k: (bucket, ex.stage(plans, bucket), 1) for k, ex in executors.items()}
    ms = alternate({k: _frame_step(executors[k], keys[k]) for k in executors}, rounds, iters,
                   torch.device("cpu"))
    return {"bucket": bucket, "max_len": max_len, "rounds": rounds,
            "paged_ms": round(statistics.median(ms["paged"]), 3),
            "contiguous_ms": round(statistics.median(ms["contiguous"]), 3),
            "paged_over_contiguous": round(paired(ms, "paged", "contiguous"), 4)}


def attention(bucket: int, context: int, rounds: int, iters: int, device: torch.device) -> dict[str, Any]:
    """One layer's decode attention at the release's head layout: one row at `context` keys, the rest at 64."""
    hkv, hq, d, size = 8, 32, 128, 16
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    k = torch.randn(bucket + 1, hkv, context, d, device=device, dtype=dtype)
    v = torch.randn_like(k)
    width = context // size
    # the same keys in scattered 16-row pages: [S + 1, Hkv, W, 16, D] -> [(S + 1) * W, Hkv, 16, D]
    order = torch.randperm((bucket + 1) * width, device=device)
    pk, pv = torch.empty_like(k).view(-1, hkv, size, d), torch.empty_like(v).view(-1, hkv, size, d)
    pk[order] = k.view(bucket + 1, hkv, width, size, d).transpose(1, 2).reshape(-1, hkv, size, d)
    pv[order] = v.view(bucket + 1, hkv, width, size, d).transpose(1, 2).reshape(-1, hkv, size, d)
    q = torch.randn(bucket, hq, d, device=device, dtype=dtype)
    slots = torch.arange(bucket, device=device)
    tables = order.view(bucket + 1, width)[slots]
    lengths = torch.full((bucket,), 64, device=device)
    lengths[0] = context
    fns = {"contiguous_torch": lambda: da.decode_attention_reference(q, k, v, slots, lengths, context),
           "paged_torch": lambda: da.paged_decode_attention_reference(q, pk, pv, tables, lengths, context)}
    if kernels_on(device):
        fns["contiguous_kernel"] = lambda: da.decode_attention(q, k, v, slots, lengths, context)
        fns["paged_kernel"] = lambda: da.paged_decode_attention(q, pk, pv, tables, lengths, context)
    times = alternate(fns, rounds, iters, device)
    out = {"bucket": bucket, "context": context,
           **{f"{key}_us": round(statistics.median(t) * 1e3, 1) for key, t in times.items()},
           "paged_over_contiguous_torch": round(paired(times, "paged_torch", "contiguous_torch"), 4)}
    if "paged_kernel" in times:
        out["paged_over_contiguous_kernel"] = round(paired(times, "paged_kernel", "contiguous_kernel"), 4)
    return out


@keeps_threads
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.families.moss_tts_local.bench.kv",
                                description=__doc__.splitlines()[0])
    p.add_argument("--budget-gb", type=float, default=100.0, help="KV budget for the capacity count (10^9 bytes)")
    p.add_argument("--block-sizes", type=int, nargs="+", default=[16, 32, 64, 128])
    p.add_argument("--voice-rows", type=int, default=160, help="rows of the prompt prefix shared in the shared case")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--skip-ttfa", action="store_true")
    p.add_argument("--bucket", type=int, default=16, help="rows of the frame step")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="for the attention rows")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # as the tiny card's engine thread runs; the CPU-time clock counts this thread
    report: dict[str, Any] = {"bench": "v2.kv", "date": time.strftime("%Y-%m-%d"), "machine": machine(args.device)}
    report["capacity"] = capacity(int(args.budget_gb * 1e9), 300, 125, args.voice_rows, args.block_sizes)
    report["frame_step"] = frame_step(args.bucket, 1024, 3 * args.rounds, 5)
    print(f"frame step: {report['frame_step']}", file=sys.stderr)
    buckets = (1, 64) if device.type == "cuda" else (1, 16)
    report["attention"] = [attention(b, 4096 if device.type == "cuda" else 1024, args.rounds, 10, device)
                           for b in buckets]
    print(f"attention: {report['attention']}", file=sys.stderr)
    if not args.skip_ttfa:
        report["ttfa"] = ttfa(args.rounds)
        print(f"ttfa: {report['ttfa']}", file=sys.stderr)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
