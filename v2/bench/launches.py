"""`python -m v2.bench.launches`: device kernels one AR frame step launches, with and without the Triton kernels.

Owns: counting, at the release's dimensions on the meta device (no memory, no GPU), the operations of
`ARExecutor._frame_step` that launch a kernel (every aten operation except views) plus the Triton kernels,
each counted once with a shape-only stand-in. Replaying a CUDA graph still pays a few microseconds per
kernel node at these sizes, so this count bounds the step time from below. One JSON line last.
Must not know: timing, requests.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from v2.bench.shapes import SHAPES
from v2.loops.ar_decode import FramePlan
from v2.models import decode_attention, kernels, moss_tts_local, qwen3
from v2.models.config import MossTTSLocalConfig
from v2.models.moss_tts_local import MossTTSLocal
from v2.models.weights import empty_model
from v2.models.sampling import SamplingSettings
from v2.runtime.executors import ARExecutor

VIEWS = {"view", "_unsafe_view", "unsqueeze", "squeeze", "select", "slice", "t", "transpose", "expand", "alias",
         "as_strided", "split", "split_with_sizes", "unbind", "permute", "detach", "reshape", "lift_fresh"}


class LaunchCounter(TorchDispatchMode):
    """Counts aten operations that launch a kernel, by name; `paused` hides a stand-in's own operations."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.paused = False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func.overloadpacket.__name__
        if not self.paused and name not in VIEWS:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def _stand_ins(counter: LaunchCounter) -> dict[tuple[Any, str], Callable[..., Any]]:
    """Shape-only replacements of the Triton entry points, each counted as its launches."""

    def counted(name: str, launches: int, make: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            counter.paused = True
            try:
                return make(*args, **kwargs)
            finally:
                counter.paused = False
                counter.ops[f"triton:{name}"] += launches
        return run

    def attention(q: torch.Tensor, *_: Any) -> torch.Tensor:
        return torch.empty_like(q)

    def norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)

    def add_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
        return torch.empty_like(x), norm(x, weight, eps)

    def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
        return gate_up[..., : gate_up.shape[-1] // 2].clone()

    def qk(qkv: torch.Tensor, num_heads: int, num_kv_heads: int, *_: Any) -> torch.Tensor:
        b, t, w = qkv.shape
        return torch.empty(b, t, num_heads, w // (num_heads + 2 * num_kv_heads), dtype=qkv.dtype, device=qkv.device)

    def sample(logits: torch.Tensor, *_: Any, **__: Any) -> tuple[torch.Tensor, torch.Tensor]:
        b = logits.shape[0]
        return (torch.zeros(b, dtype=torch.long, device=logits.device),
                torch.zeros(b, dtype=torch.float32, device=logits.device))

    return {(decode_attention, "_decode_attention_triton"): counted("decode_attention", 2, attention),
            (qwen3, "rms_norm_fused"): counted("rms_norm", 1, norm),
            (qwen3, "add_rms_norm_fused"): counted("add_rms_norm", 1, add_norm),
            (qwen3, "silu_mul_fused"): counted("silu_mul", 1, swiglu),
            (qwen3, "qk_norm_rope_write"): counted("qk_norm_rope_write", 1, qk),
            (moss_tts_local, "sample_fused"): counted("sample", 1, sample)}


@contextmanager
def _patched(replacements: dict[tuple[Any, str], Callable[..., Any]], force: bool) -> Iterator[None]:
    saved = {key: getattr(*key) for key in replacements}
    saved_force = kernels.FORCE
    try:
        for (module, name), fn in replacements.items():
            setattr(module, name, fn)
        kernels.FORCE = force
        yield
    finally:
        for (module, name), fn in saved.items():
            setattr(module, name, fn)
        kernels.FORCE = saved_force


def count(model: MossTTSLocal, bucket: int, context: int, use_kernels: bool) -> Counter[str]:
    """Launches of one frame step for `bucket` rows at mixed positions below `context`."""
    ex = ARExecutor(model, num_slots=bucket, max_len=context, batch_buckets=[bucket], graphs=False)
    for slot in range(bucket):
        ex.admit(slot, SamplingSettings(), seed=slot)
    key = ex.graph_key(bucket, ex.stage([FramePlan(i, (37 * i) % (context - 64) + 32, 5, True)
                                         for i in range(bucket)], bucket))
    counter = LaunchCounter()
    with _patched(_stand_ins(counter), force=use_kernels and kernels.triton is not None), torch.no_grad(), counter:
        ex._frame_step(key)
    return counter.ops


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench.launches", description=__doc__.splitlines()[0])
    p.add_argument("--buckets", type=int, nargs="+", default=[1, 64])
    p.add_argument("--context", type=int, default=512)
    args = p.parse_args(argv)
    config = json.loads(SHAPES.joinpath("moss_tts_local_v1_5.json").read_text())
    model = empty_model(MossTTSLocal, MossTTSLocalConfig.from_dict(config)).to(torch.bfloat16)  # shapes only
    rows = []
    for bucket in args.buckets:
        row: dict[str, Any] = {"bucket": bucket}
        for label, on in (("torch", False), ("kernels", True)):
            ops = count(model, bucket, args.context, on)
            row[f"{label}_launches"] = sum(ops.values())
            row[f"{label}_top"] = dict(ops.most_common(8))
        rows.append(row)
        print(f"bucket={bucket} torch={row['torch_launches']} kernels={row['kernels_launches']}", file=sys.stderr)
    print(json.dumps({"bench": "v2.launches", "dims": "release", "device": "meta", "context": args.context,
                      "buckets": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
