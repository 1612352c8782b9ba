"""MOSS-TTS-Local's side of the launch count (`python -m v2.bench.launches`): its model at the release's
dimensions, and one AR frame step ready to count.

Owns: `counting_model(shapes)`: the model at a config's dimensions (default: the release's,
`shapes/moss_tts_local_v1_5.json`) on the meta device in bfloat16 (shapes only: no memory, no weights);
`frame_step_for_count(model, bucket, context)`: an `ARExecutor` with `bucket` admitted rows at mixed
positions below `context`, staged, and the one call that runs its frame step (`ARExecutor.frame_step`,
what a CUDA graph captures), made before anything is counted; `options` (none of its own) and `run` (each
bucket counted with the torch forms and with the kernels, by `v2.bench.launches.counted`).
Must not know: how launches are counted, kernels' stand-ins, timing.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Mapping

import torch

from v2.families.moss_tts_local.ar_decode import FramePlan
from v2.families.moss_tts_local.ar_executor import ARExecutor
from v2.families.moss_tts_local.shapes import SHAPES
from v2.models.moss_tts_local.config import MossTTSLocalConfig
from v2.models.moss_tts_local.model import MossTTSLocal
from v2.models.weights import empty_model
from v2.sampling_settings import SamplingSettings

RELEASE = "moss_tts_local_v1_5.json"


def counting_model(shapes: Mapping[str, Any] | None = None) -> MossTTSLocal:
    """The model at `shapes` (a config.json's contents; default the release's) on the meta device, bfloat16."""
    config = dict(shapes) if shapes is not None else json.loads(SHAPES.joinpath(RELEASE).read_text())
    return empty_model(MossTTSLocal, MossTTSLocalConfig.from_dict(config)).to(torch.bfloat16)  # shapes only


def frame_step_for_count(model: MossTTSLocal, bucket: int, context: int) -> Callable[[], Any]:
    """One frame step for `bucket` rows at mixed positions in [32, context - 32) (`context` > 64): the executor is
    built, its slots admitted and the step staged now; the call returned runs the step alone."""
    ex = ARExecutor(model, num_slots=bucket, max_len=context, batch_buckets=[bucket], graphs=False)
    for slot in range(bucket):
        ex.admit(slot, SamplingSettings(), seed=slot)
    key = ex.graph_key(bucket, ex.stage([FramePlan(i, (37 * i) % (context - 64) + 32, 5, True)
                                         for i in range(bucket)], bucket))
    return lambda: ex.frame_step(key)


def options(parser: argparse.ArgumentParser) -> None:
    """No options of its own: the release has one size."""


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each of `args.buckets` counted with the torch forms and with the kernels: totals, the top eight, the whole
    per-kernel breakdown and the Triton launches; the table goes to stderr."""
    from v2.bench.launches import counted

    model = counting_model()  # the release's dimensions, shapes only
    rows = []
    for bucket in args.buckets:
        row: dict[str, Any] = {"bucket": bucket}
        for label, on in (("torch", False), ("kernels", True)):
            ops = counted(frame_step_for_count(model, bucket, args.context), on)
            row[f"{label}_launches"] = sum(ops.values())
            row[f"{label}_top"] = dict(ops.most_common(8))
            row[f"{label}_ops"] = dict(ops.most_common())  # the whole per-kernel breakdown
            if on:
                row["triton"] = {k.split(":", 1)[1]: n for k, n in sorted(ops.items()) if k.startswith("triton:")}
        rows.append(row)
        print(f"bucket={bucket} torch={row['torch_launches']} kernels={row['kernels_launches']}", file=sys.stderr)
        for name, n in row["kernels_ops"].items():
            print(f"  {n:5d}  {name}", file=sys.stderr)
    return {}, rows
