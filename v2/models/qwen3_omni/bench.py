"""`python -m v2.models.qwen3_omni.bench --checkpoint DIR`: the Qwen3-Omni thinker's model-level step costs.

Owns: timing, on one device, of log-mel + the audio encoder for a clip, a prefill of `--prefill` rows and a
decode step (`MoeDecoder.forward_cached` + `Thinker.logits` + argmax) at batch 1 and `--batch`, medians of
`--repeats` steps after one warm-up; one JSON line last. No runtime, no scheduler: the models alone.
Must not know: requests, families, cards. (It sits with the models until the family exists: a package under
v2/families/ is a family to the registry.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

from v2.bench.threads import keeps_threads
from v2.models.kv_cache import KVCache
from v2.models.aut.features import log_mel
from v2.models.qwen3_omni.thinker import Thinker, load_thinker


def _ms(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 2)


def measure(th: Thinker, batch: int, prefill: int, repeats: int, device: torch.device) -> dict[str, float]:
    d = th.cfg.text.decoder
    gen = torch.Generator().manual_seed(0)
    out: dict[str, float] = {}
    wave = (torch.randn(24000, generator=gen) * 0.1).to(device)
    out["audio_1.5s_ms"] = _ms(lambda: th.audio_tower.encode([log_mel(wave, th.cfg.audio)]), repeats, device)
    for b in sorted({1, batch}):
        cache = KVCache.allocate(d, b, prefill + 2, dtype=torch.float32, device=device)
        slots = torch.arange(b, device=device)
        x = torch.randn(b, prefill, d.hidden_size, generator=gen).to(device)
        pos = torch.arange(prefill, device=device).expand(b, prefill)
        out[f"prefill_{prefill}_b{b}_ms"] = _ms(lambda: th.model.forward_cached(x, cache, slots, pos), repeats, device)
        row = torch.randn(b, 1, d.hidden_size, generator=gen).to(device)
        step = torch.full((b, 1), prefill, device=device)
        out[f"decode_step_b{b}_ms"] = _ms(
            lambda: th.logits(th.model.forward_cached(row, cache, slots, step)[:, 0]).argmax(-1), repeats, device)
    return out


@keeps_threads
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--checkpoint", type=Path, required=True,
                    help="a Qwen3-Omni checkpoint folder, e.g. tests/fixtures/qwen3_omni_tiny/checkpoint (no default)")
    ap.add_argument("--device", default="cpu", help="torch device (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=16, help="rows of the batched side (default: %(default)s)")
    ap.add_argument("--prefill", type=int, default=32, help="prompt rows each row prefills (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=8, help="timed runs of each part; the median is reported "
                    "(default: %(default)s)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: %(default)s)")
    args = ap.parse_args()
    from v2.bench.__main__ import machine  # the JSON line's machine fields, as every bench's

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    th = load_thinker(args.checkpoint, device=device)
    with torch.no_grad():
        result = measure(th, args.batch, args.prefill, args.repeats, device)
    print(json.dumps({"bench": "omni_thinker", **result, "machine": machine(args.device)}))


if __name__ == "__main__":
    main()
