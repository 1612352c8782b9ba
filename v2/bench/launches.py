"""`python -m v2.bench.launches`: device kernels one AR frame step launches, with and without the Triton kernels.

Owns: the counter: at the release's dimensions on the meta device (no memory, no GPU), the operations of a
step that launch a kernel (every aten operation except views and allocations, including those of the
Triton kernels' Python wrappers) plus the Triton launches themselves, each kernel replaced by a counter
(`LaunchCounter`, `counted`), and the command: `--card NAME|PATH` or `--family NAME` (default: the default
card's family) picks whose frame step is counted; that family's bench package builds its model and step
and says which options it takes (`launches.options`, `launches.run`: v2/bench/family.py), e.g. a release
size. Counted in a step after one warm-up step (as a captured graph is); the whole breakdown by kernel is
printed and in the JSON line (`kernels_ops`). Replaying a CUDA graph still pays a few microseconds per
kernel node at these sizes, so this count bounds the step time from below. One JSON line last.
Must not know: timing, requests, any family.
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
from v2.bench.family import choose, part
from v2.models import kernels
from v2.models.kernels import (decode_attention, frame_attention, grouped_experts, layer_norm, local_attention,
                               moe_route, norm_linear, qk_rope, rms_norm, sample, swiglu)

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
                         rms_norm: ["_rms_norm_kernel", "_embed_rms_norm_kernel"],
                         swiglu: ["_silu_mul_kernel", "_gate_up_kernel"], qk_rope: ["_qk_rope_kernel"],
                         local_attention: ["_local_attention_kernel"], frame_attention: ["_frame_attention_kernel"],
                         layer_norm: ["_add_layer_norm_kernel", "_embed_layer_norm_kernel"],
                         norm_linear: ["_norm_linear_kernel"],
                         grouped_experts: ["_expert_gate_up_kernel", "_expert_down_kernel", "_expert_combine_kernel"],
                         moe_route: ["_route_kernel", "_add_norm_route_kernel"]}
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


def counted(step: Callable[[], Any], use_kernels: bool, warm_up: bool = True) -> Counter[str]:
    """Launches of one call of `step` (after one uncounted warm-up call, as before a graph capture: buffers
    made once are made there), with the torch forms or with the Triton kernels (each a counter)."""
    counter = LaunchCounter()
    with _patched(_stand_ins(counter), force=use_kernels and kernels.triton is not None), torch.no_grad():
        if warm_up:
            step()
            counter.ops.clear()
        with counter:
            step()
    return counter.ops


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.bench.launches", description=__doc__.splitlines()[0])
    p.add_argument("--card", default=None, help="count this card's family's frame step (default: the default card)")
    p.add_argument("--family", default=None,
                   help="count this family's frame step (a registered family's name; default: the card's)")
    p.add_argument("--buckets", type=int, nargs="+", default=[1, 64],
                   help="batch sizes whose frame step is counted (default: 1 64)")
    p.add_argument("--context", type=int, default=512,
                   help="tokens already in each sequence's KV cache (default: %(default)s)")
    known, _ = p.parse_known_args(argv)
    family, _card = choose(known.card, known.family, p)
    hooks = part(family, "launches")
    if hooks is None:
        p.error(f"family {family!r} has no launch count (its bench package has no `launches`)")
    hooks.options(p)
    args = p.parse_args(argv)
    if args.context <= 64:
        p.error("--context must exceed 64 (rows sit at mixed positions from 32 up)")
    fields, rows = hooks.run(args)
    print(json.dumps({"bench": "v2.launches", "family": family, **fields, "dims": "release", "device": "meta",
                      "machine": machine("cpu"), "context": args.context, "buckets": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
