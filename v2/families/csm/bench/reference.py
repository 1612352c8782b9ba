"""CSM's frame step against transformers' `CsmForConditionalGeneration.generate` (`python -m v2.bench.reference
--family csm [--reference CHECKPOINT]`, or `python -m v2.families.csm.bench.reference`, the tiny fixture's
checkpoint by default).

Owns: the side-by-side scenario on one checkpoint in the release layout, float32 on the CPU, one intra-op thread
on every side, in two modes: greedy (`temperature: 0`; the reference's `do_sample=False,
depth_decoder_do_sample=False`) and sampled (the checkpoint's generation_config.json settings, the same for
both sides; codes cannot be equal there: the draws differ). Per mode:
- batch 1: v2's `generate` (the model's eager loop) and a one-request runtime against the reference's
  `generate` of one prompt (goal: <= 0.6x);
- batch N (16): v2's `generate_batch` (side `generate_N`) and the runtime with N requests against the
  reference's batched `generate` of the same N prompts, left-padded (goal: the runtime <= 0.5x per row-frame);
timed in interleaved repetitions (the order rotates each repetition), each v2 side divided by the reference's
run of the same batch and mode in the same repetition (paired ratios: this shared machine's speed drifts);
medians reported, with the load average before and after, and per mode the aten operations of one frame step
at batch 1 and N on both sides (load-independent: where the time goes). Every row makes exactly `frames`
frames: both sides run a copy of the checkpoint whose config.json names a spare id (`vocab_size - 2`, never
drawn) as `codebook_eos_token_id`, so the stop rule never fires and nothing else changes for text-only
prompts (that id is read only by the stop rule, the audio cut and `<|audio_eos|>` rows). Greedy codes are compared and
asserted: the runtime's equal `generate_batch`'s row for row, row 0 of the batch equals the batch-1 run, and
v2's equal the reference's (batch 1 and batch N); with the fixture, the reference's greedy codes of its s0, s1
and ctx prompts equal the stored ones (the fixture was made with transformers 5.0.0).
The reference runs in a child process (`reference_worker.py`) under its own python, so transformers never
enters this environment (transformers 5.0.0 pins tokenizers and huggingface_hub below the versions v2 uses):
`--reference-python` or `$V2_CSM_REFERENCE_PYTHON` (`PYTHON_ENV`; default: this one; `v2.bench.reference`'s
skip check sees only the variable). The checkpoint: `--reference DIR` or `$V2_CSM_REFERENCE` (`ENV`),
else the tiny fixture's (`DEFAULT_REFERENCE`).
`check(path)` says why the scenario cannot run (no checkpoint there, or transformers' CSM not importable by the
reference's python): the command prints that line and skips. The command, the skip and the table are
`v2.bench.reference`'s; the prompts, the checkpoint copy, the card and the child process are
reference_setup.py's.
Must not know: model or engine internals (it calls `generate`, `generate_batch`, `Runtime.submit_many`).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from v2.bench import reference_kit as kit
from v2.families.csm.bench.reference_setup import (CHECKPOINT, FIXTURE, ReferenceProcess, fixture_card,
                                                   ops_per_frame, prompts, sampled_settings, without_stop)
from v2.bench.threads import keeps_threads

ENV, PYTHON_ENV = "V2_CSM_REFERENCE", "V2_CSM_REFERENCE_PYTHON"
DEFAULT_REFERENCE = CHECKPOINT  # what `v2.bench.reference` runs without --reference or `ENV`
MODES = ("greedy", "sampled")
GOALS = {"batch_1": 0.6, "batch_n": 0.5}  # x the reference's time per row-frame (Engine V)


def reference_python() -> str:
    """The reference's python when no flag names one: `$V2_CSM_REFERENCE_PYTHON`, else this one."""
    return os.environ.get(PYTHON_ENV) or sys.executable


def transformers_missing(python: str) -> str:
    """Why `python` cannot run the reference ("" when transformers' CSM imports there)."""
    probe = "import transformers; from transformers import CsmForConditionalGeneration"
    return kit.import_missing(python, probe, lambda last: (
        f"transformers' CSM is not importable by {python} ({last}): install transformers there (5.0.0 made the "
        f"fixture) or name a python that has it with ${PYTHON_ENV}"))


def not_a_checkpoint(path: Path) -> str:
    """Why `path` is not a CSM checkpoint in the transformers layout ("" when it is)."""
    return kit.not_a_checkpoint(path, "csm", f"a CSM checkpoint in the transformers layout, e.g. {CHECKPOINT}")


def check(path: Path) -> str:
    """Why the scenario cannot run on checkpoint `path` with the reference's python named by the environment
    ("" when it can)."""
    return not_a_checkpoint(path) or transformers_missing(reference_python())


def _request(ids: list[int], seed: int, frames: int, sampling: dict[str, Any] | None) -> dict[str, Any]:
    """One v2 request of a prompt's ids (the turn's ids: without `<|begin_of_text|>` / `<|end_of_text|>`)."""
    return {"text_ids": ids[1:-1], "seed": seed, "max_frames": frames, "decode_audio": False,
            **(sampling if sampling is not None else {"temperature": 0.0})}


@keeps_threads
def compare(reference: Path, python: str, *, frames: int = 64, batch: int = 16, repeat: int = 5,
            log: Callable[[str], None] = lambda s: None, modes: tuple[str, ...] = MODES,
            count_ops: bool = True) -> dict[str, Any]:
    """The scenario on checkpoint `reference`; per side: ms per row-frame (median, min) and the median paired
    ratio to the reference's run of the same batch and mode; `count_ops`: also the operations per frame step
    (`ops_per_frame_step`, None without: counting runs every operation through Python, seconds). Raises
    AssertionError (after logging the report) when greedy codes that must be equal are not."""
    from v2.families.csm.rows import embed_rows
    from v2.models.csm.generate import generate, generate_batch
    from v2.runtime import Runtime

    if batch < 2 or frames < 1 or repeat < 1:
        raise ValueError(f"batch must be >= 2, frames and repeat >= 1 (got {batch}, {frames}, {repeat})")
    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory(prefix="v2_csm_bench_")
    ck = without_stop(reference, Path(tmp.name) / "checkpoint")
    sampling = sampled_settings(reference)
    ids = prompts(batch)
    is_fixture = reference.resolve() == CHECKPOINT.resolve()
    load_before = os.getloadavg()
    rt = Runtime.from_card(fixture_card(batch, frames), checkpoint=str(ck), device="cpu", dtype=torch.float32)
    ref: ReferenceProcess | None = None
    try:
        ref = ReferenceProcess(python, ck, ids, sampling, FIXTURE if is_fixture else None)
        family, model = rt.family, rt.model
        work = {m: [family.prepare(family.parse(_request(p, i, frames, None if m == "greedy" else sampling)))
                    for i, p in enumerate(ids)] for m in modes}
        with torch.no_grad():
            rows = [embed_rows(model, w.rows.to(model.device)) for w in work[modes[0]]]

        def serve(mode: str, n: int) -> list[np.ndarray]:
            handles = rt.submit_many([_request(p, i, frames, None if mode == "greedy" else sampling)
                                      for i, p in enumerate(ids[:n])])
            return [np.asarray(h.result().codes) for h in handles]

        def one(mode: str) -> list[np.ndarray]:
            w = work[mode][0]
            return [generate(model, rows[0], max_new_tokens=frames, sampling=w.sampling, seed=0).codes.numpy()]

        def many(mode: str) -> list[np.ndarray]:
            gens = generate_batch(model, rows, [w.sampling for w in work[mode]], list(range(batch)),
                                  max_new_tokens=frames)
            return [g.codes.numpy() for g in gens]

        sides: dict[str, Callable[[str], list[np.ndarray]]] = {
            "generate_1": one, "runtime_1": lambda m: serve(m, 1),
            f"generate_{batch}": many, f"runtime_{batch}": lambda m: serve(m, batch)}
        order = kit.order(modes, batch)
        walls, codes = kit.time_sides(order, sides, ref, frames, repeat, log)
        ops = {f"{m}/{side}_{n}": ops_per_frame(lambda f: generate_batch(
                   model, rows[:n], [w.sampling for w in work[m][:n]], list(range(n)), max_new_tokens=f))
               if side == "generate" else ref.ops_per_frame(n, m == "greedy")
               for m in modes for n in (1, batch) for side in ("reference", "generate")} if count_ops else None
    finally:
        if ref is not None:
            ref.close()
        rt.close()
        tmp.cleanup()
    report = kit.report(order, walls, codes, frames, batch, modes, GOALS)
    report.update({"ops_per_frame_step": ops, "repeat": repeat, "checkpoint": str(reference),
                   "sampled_settings": sampling,
                   "stop": "disabled: codebook_eos_token_id = vocab_size - 2 in a copy of config.json",
                   "reference_python": python, "reference_torch": ref.ready.get("torch") if ref else None,
                   "reference_transformers": ref.ready.get("transformers") if ref else None,
                   "reference_fixture_codes_equal": ref.ready.get("fixture_codes_equal") if ref else None,
                   "load_average_before": list(load_before), "load_average_after": list(os.getloadavg())})
    kit.assert_equal(report, log)
    return report


def main(argv: list[str] | None = None) -> int:
    """`python -m v2.families.csm.bench.reference`: the scenario on `--checkpoint` (default: the tiny fixture's);
    the table, then one JSON line (`v2.bench.reference`'s), or the skip and its reason."""
    return kit.main(argv, family="csm", doc=__doc__ or "", checkpoint=os.environ.get(ENV) or str(CHECKPOINT),
                    python_env=PYTHON_ENV, needs="transformers", modes=MODES, reference_python=reference_python,
                    why=lambda path, python: not_a_checkpoint(path) or transformers_missing(python), compare=compare)


if __name__ == "__main__":
    sys.exit(main())
