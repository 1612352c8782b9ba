"""`python -m v2.families.qwen3_tts.bench.decode_row`: the talker's paged decode row on a CPU, the generic pass
against `decode_row` (the same values), alternated in one process.

Owns: timing `Qwen3Backbone.forward_cached` for one position per row over a `PagedKVCache` (blocks of 16
scattered over the pool, rows at mixed positions below the context) both ways, per batch and context: CPU
milliseconds per call (the best of `--repeat` alternations, so a loaded machine's waits count less), operations
dispatched per call, and whether the two gave the same output bits. Default dims: the tiny fixture's talker
(tests/fixtures/qwen3_tts_tiny: hidden 64, 4 query / 2 kv heads of 128, 2 layers); the flags give others (CSM's
backbone: `--hidden 48 --head-dim 12 --intermediate 96 --no-qk-norm`). One JSON line last.
Must not know: requests, scheduling, the runtime.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from v2.bench.__main__ import machine
from v2.models import decode_row
from v2.models.config import BackboneConfig
from v2.models.kv_cache import PagedKVCache
from v2.models.qwen3 import Qwen3Backbone
from v2.bench.threads import keeps_threads


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.n += 1
        return func(*args, **(kwargs or {}))


def _cpu_ms(fn: Callable[[], Any], iters: int) -> float:
    fn()
    start = time.process_time()
    for _ in range(iters):
        fn()
    return (time.process_time() - start) / iters * 1e3


@keeps_threads
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.families.qwen3_tts.bench.decode_row",
                                description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--no-qk-norm", action="store_true")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    p.add_argument("--contexts", type=int, nargs="+", default=[64, 128])
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    if min(args.contexts) < 32:
        p.error("--contexts must be >= 32")
    torch.set_num_threads(1)
    cfg = BackboneConfig(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                         num_kv_heads=args.kv_heads, head_dim=args.head_dim, intermediate_size=args.intermediate,
                         vocab_size=8, rms_norm_eps=1e-6, rope_theta=1e6)
    torch.manual_seed(0)
    model = Qwen3Backbone(cfg, embed_tokens=False, qk_norm=not args.no_qk_norm)
    fits = decode_row.fits
    rows = []
    with torch.no_grad():
        for p_ in model.parameters():
            p_.normal_(0.0, 0.3)
        for b in args.batches:
            for ctx in args.contexts:
                width = -(-ctx // 16)
                cache = PagedKVCache.allocate(cfg, b * width, 16, dtype=torch.float32, device="cpu")
                cache.k.normal_()
                cache.v.normal_()
                tables = torch.randperm(b * width).view(b, width)
                pos = torch.tensor([(37 * i) % (ctx // 2) + ctx // 2 - 1 for i in range(b)])[:, None]
                x, valid = torch.randn(b, 1, cfg.hidden_size), torch.ones(b, 1, dtype=torch.bool)
                row: dict[str, Any] = {"batch": b, "context": ctx}
                outs = {}
                for _ in range(args.repeat):
                    for mode in ("generic", "decode_row"):
                        decode_row.fits = fits if mode == "decode_row" else (lambda x, cache: False)
                        def call() -> torch.Tensor:
                            return model.forward_cached(x, cache, tables, pos, valid, ctx)
                        ms = _cpu_ms(call, args.iters)
                        row[f"{mode}_cpu_ms"] = min(row.get(f"{mode}_cpu_ms", ms), ms)
                        with _Count() as c:
                            outs[mode] = call()
                        row[f"{mode}_ops"] = c.n
                decode_row.fits = fits
                row["same_bits"] = bool(torch.equal(outs["generic"], outs["decode_row"]))
                print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                      file=sys.stderr)
                rows.append(row)
    print(json.dumps({"bench": "v2.qwen3_tts.decode_row", "dims": vars(args), "machine": machine("cpu"),
                      "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
