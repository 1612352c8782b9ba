"""The CPU exact attention, old form against new: `python -m v2.bench.attention_tiles [--repeat N]`.

Owns: the in-process A/B of `attention_tiles.attention_reference` (the form `exact.attention` ran before) and
`attention_tiles.attention` (the form it runs), alternated call by call on one thread so a busy spell on a shared
machine hits both, at the forced aligner's decoder shapes (cards/forced_aligner_tiny.toml: 4 query heads, 2 kv
heads, head dim 32; batches of 1-16 spans of 58-287 rows, each span's keys masked past its own length and
causally) and at a family prefill's (16 / 8 heads of 128, causal). Checks the two give the same bits, then prints
one JSON line per shape (each form's median ms, the ratio) and a last line with all of them.
Must not know: models, the aligner, the runtime.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from v2.bench.threads import keeps_threads
from v2.models import attention_tiles

# (B, Hq, Hkv, T = C, D): the aligner's decoder, then a family's prefill
SHAPES = [(1, 4, 2, 58, 32), (1, 4, 2, 287, 32), (4, 4, 2, 150, 32), (8, 4, 2, 287, 32), (16, 4, 2, 58, 32),
          (16, 4, 2, 287, 32), (1, 16, 8, 256, 128), (2, 16, 8, 128, 128)]


def operands(b: int, hq: int, hkv: int, t: int, d: int) -> tuple[torch.Tensor, ...]:
    """q [B, Hq, T, D], k, v [B, Hkv, T, D] and a mask [B, 1, T, T]: span i attends keys < its length (the first
    span the longest, as a padded batch's), causally."""
    gen = torch.Generator().manual_seed(b * 1000 + t)
    q, k, v = (torch.randn(b, h, t, d, generator=gen) for h in (hq, hkv, hkv))
    lengths = torch.randint(max(1, t // 4), t + 1, (b,), generator=gen)
    lengths[0] = t
    keys = torch.arange(t)
    mask = (keys[None, :] < lengths[:, None])[:, None, None, :] & (keys[None, :] <= keys[:, None])  # [B, 1, T, T]
    return q, k, v, mask


def measure(shape: tuple[int, int, int, int, int], repeat: int) -> dict[str, object]:
    q, k, v, mask = operands(*shape)
    old: list[float] = []
    new: list[float] = []
    with torch.inference_mode():
        same = torch.equal(attention_tiles.attention_reference(q, k, v, mask).view(torch.int32),
                           attention_tiles.attention(q, k, v, mask).view(torch.int32))
        for _ in range(repeat):
            start = time.perf_counter()
            attention_tiles.attention_reference(q, k, v, mask)
            old.append(time.perf_counter() - start)
            start = time.perf_counter()
            attention_tiles.attention(q, k, v, mask)
            new.append(time.perf_counter() - start)
    o, n = statistics.median(old) * 1e3, statistics.median(new) * 1e3
    return {"B,Hq,Hkv,T=C,D": list(shape), "same_bits": same, "old_ms": round(o, 2), "new_ms": round(n, 2),
            "speedup": round(o / n, 2)}


@keeps_threads
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9,
                        help="calls of each form per shape, alternated (default: %(default)s)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    torch.set_num_threads(1)
    rows = []
    for shape in SHAPES:
        rows.append(measure(shape, args.repeat))
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"attention_tiles": rows, "torch": torch.__version__,
                      "capability": torch.backends.cpu.get_cpu_capability()}))


if __name__ == "__main__":
    main()
