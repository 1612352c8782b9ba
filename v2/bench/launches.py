"""`python -m v2.bench.launches`: device kernels one AR frame step launches, with and without the Triton kernels.

Owns: counting, at the release's dimensions on the meta device (no memory, no GPU), the operations of one
AR frame step that launch a kernel (the family builds the model and the step: MOSS-TTS-Local's
`v2.families.moss_tts_local.launches`) (every aten operation except views and allocations,
including those of the Triton kernels' Python wrappers) plus the Triton launches themselves, each kernel
replaced by a counter, in a step after one warm-up step (as a captured graph is); the whole breakdown by
kernel is printed and in the JSON line (`kernels_ops`). Replaying a CUDA graph still pays a few microseconds
per kernel node at these sizes, so this count bounds the step time from below. One JSON line last.
`--family qwen3_tts` counts a Qwen3-TTS 12 Hz frame step instead (`--size 1.7b | 0.6b`; launches_qwen3.py),
with every kernel by name.
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

from v2.bench.__main__ import machine
from v2.families.moss_tts_local.launches import counting_model, frame_step_for_count
from v2.models import kernels
from v2.models.kernels import decode_attention, layer_norm, local_attention, qk_rope, rms_norm, sample, swiglu

# operations that launch no kernel: views, allocations, dtype queries
NO_LAUNCH = {"view", "_unsafe_view", "unsqueeze", "squeeze", "select", "slice", "t", "transpose", "expand", "alias",
             "as_strided", "split", "split_with_sizes", "unbind", "permute", "detach", "reshape", "lift_fresh",
             "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "promote_types",
             "result_type"}


class LaunchCounter(TorchDispatchMode):
    """Counts aten operations that launch a kernel, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = func.overloadpacket.__name__
        if name not in NO_LAUNCH:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


class _CountedKernel:
    """Stands in for a Triton kernel: `kernel[grid](...)` counts one launch and writes nothing."""

    def __init__(self, name: str, counter: LaunchCounter) -> None:
        self.name, self.counter = name, counter

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.counter.ops[f"triton:{self.name}"] += 1
        return launch


def _stand_ins(counter: LaunchCounter) -> dict[tuple[Any, str], Any]:
    """Every Triton kernel the model launches, replaced by a counter (their Python wrappers still run)."""
    kernels_by_module = {decode_attention: ["_split_kernel"], sample: ["_sample_kernel"],
                         rms_norm: ["_rms_norm_kernel"], swiglu: ["_silu_mul_kernel"],
                         qk_rope: ["_qk_rope_kernel"], local_attention: ["_local_attention_kernel"],
                         layer_norm: ["_add_layer_norm_kernel", "_embed_layer_norm_kernel"]}
    return {(module, name): _CountedKernel(name.strip("_").removesuffix("_kernel"), counter)
            for module, names in kernels_by_module.items() for name in names}


@contextmanager
def _patched(replacements: dict[tuple[Any, str], Any], force: bool) -> Iterator[None]:
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


def count(model: Any, bucket: int, context: int, use_kernels: bool) -> Counter[str]:
    """Launches of one frame step for `bucket` rows at mixed positions below `context`."""
    frame_step = frame_step_for_count(model, bucket, context)
    counter = LaunchCounter()
    with _patched(_stand_ins(counter), force=use_kernels and kernels.triton is not None), torch.no_grad():
        frame_step()  # a warm-up step, as before a graph capture (buffers made once are made here)
        counter.ops.clear()
        with counter:
            frame_step()
    return counter.ops


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench.launches", description=__doc__.splitlines()[0])
    p.add_argument("--buckets", type=int, nargs="+", default=[1, 64])
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--family", choices=["moss_tts_local", "qwen3_tts"], default="moss_tts_local",
                   help="whose frame step: MOSS-TTS-Local v1.5, or Qwen3-TTS 12 Hz (launches_qwen3.py)")
    p.add_argument("--size", choices=["1.7b", "0.6b"], default="1.7b", help="the Qwen3-TTS release size")
    args = p.parse_args(argv)
    if args.context <= 64:
        p.error("--context must exceed 64 (rows sit at mixed positions from 32 up)")
    if args.family == "qwen3_tts":
        return _qwen3(args)
    model = counting_model()  # MOSS-TTS-Local v1.5's release dimensions, shapes only
    rows = []
    for bucket in args.buckets:
        row: dict[str, Any] = {"bucket": bucket}
        for label, on in (("torch", False), ("kernels", True)):
            ops = count(model, bucket, args.context, on)
            row[f"{label}_launches"] = sum(ops.values())
            row[f"{label}_top"] = dict(ops.most_common(8))
            row[f"{label}_ops"] = dict(ops.most_common())  # the whole per-kernel breakdown
            if on:
                row["triton"] = {k.split(":", 1)[1]: n for k, n in sorted(ops.items()) if k.startswith("triton:")}
        rows.append(row)
        print(f"bucket={bucket} torch={row['torch_launches']} kernels={row['kernels_launches']}", file=sys.stderr)
        for name, n in row["kernels_ops"].items():
            print(f"  {n:5d}  {name}", file=sys.stderr)
    print(json.dumps({"bench": "v2.launches", "dims": "release", "device": "meta", "machine": machine("cpu"),
                      "context": args.context, "buckets": rows}))
    return 0


def _qwen3(args: argparse.Namespace) -> int:
    from v2.bench import launches_qwen3

    model = launches_qwen3.release_model(args.size)
    rows = []
    for bucket in args.buckets:
        row = launches_qwen3.bucket_row(model, bucket, args.context)
        rows.append(row)
        print(f"bucket={bucket} torch={row['torch_launches']} {row['torch_parts']} "
              f"kernels={row['kernels_launches']} {row['kernels_parts']}", file=sys.stderr)
        for name, n in row["kernels_ops"].items():
            print(f"  {name:<28} {n:>6}", file=sys.stderr)
    print(json.dumps({"bench": "v2.launches", "family": "qwen3_tts", "size": args.size, "dims": "release",
                      "device": "meta", "machine": machine("cpu"), "context": args.context, "buckets": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
