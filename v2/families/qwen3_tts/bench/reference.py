"""Qwen3-TTS's frame step against its reference implementation's `generate` (the `qwen_tts` package of
QwenLM/Qwen3-TTS; `python -m v2.bench.reference --family qwen3_tts [--reference CHECKPOINT]`, or `python -m
v2.families.qwen3_tts.bench.reference`, the tiny fixture's checkpoint by default).

Owns: the side-by-side scenario on one checkpoint in the release layout, float32 on the CPU, one intra-op
thread on every side, custom-voice prompts (reference_setup.py), in two modes: greedy (`temperature: 0`; the
reference's `do_sample=False, subtalker_dosample=False`) and sampled (the checkpoint's generation_config.json
settings, the same for both sides; codes cannot be equal there: the draws differ), the checkpoint's repetition
penalty in both. Per mode:
- batch 1: v2's `generate` (the model's eager loop) and a one-request runtime against the reference's
  `generate` of one prompt (goal: <= 0.6x);
- batch N (16): v2's `generate_batch` (side `generate_N`) and the runtime with N requests against the
  reference's batched `generate` of the same N prompts (it left-pads them; goal: the runtime <= 0.5x per
  row-frame);
timed in interleaved repetitions (the order rotates each repetition), each v2 side divided by the reference's
run of the same batch and mode in the same repetition (paired ratios: this shared machine's speed drifts);
medians reported, with the load average before and after, and per mode the aten operations of one frame step
at batch 1 and N on both sides (load-independent: where the time goes). Every row makes exactly `frames`
frames: EOS is masked at every choice on both sides (v2: `min_frames` = `max_frames`; the reference: its
talker's `min_new_tokens` = `max_new_tokens`, reference_worker.py). Greedy codes are compared and asserted:
the runtime's equal `generate_batch`'s row for row, row 0 of the batch equals the batch-1 run, and v2's equal
the reference's (batch 1 and batch N); with the fixture, the reference's greedy free run of `cv` equals the
stored codes (the fixture was made with QwenLM/Qwen3-TTS at 022e286b98fb).
The reference runs in a child process (`reference_worker.py`) under its own python, so its dependencies
(transformers 4.57.3, accelerate, librosa, ...) never enter this environment: `--reference-python` or
`$V2_QWEN3_TTS_REFERENCE_PYTHON` (`PYTHON_ENV`; default: this one; `v2.bench.reference`'s skip check sees only
the variable). The checkpoint: `--reference DIR` or `$V2_QWEN3_TTS_REFERENCE` (`ENV`),
else the tiny fixture's (`DEFAULT_REFERENCE`). `check(path)` says why
the scenario cannot run (no checkpoint there, or `qwen_tts` not importable by the reference's python): the
command prints that line and skips. The command, the skip and the table are `v2.bench.reference`'s.
Must not know: model or engine internals (it calls `generate`, `generate_batch`, `Runtime.submit_many`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from v2.bench import reference_kit as kit
from v2.families.qwen3_tts.bench.reference_setup import (CHECKPOINT, FIXTURE, WORKER, ReferenceProcess,
                                                         fixture_card, ops_per_frame, prompts, settings)
from v2.bench.threads import keeps_threads

ENV, PYTHON_ENV = "V2_QWEN3_TTS_REFERENCE", "V2_QWEN3_TTS_REFERENCE_PYTHON"
DEFAULT_REFERENCE = CHECKPOINT  # what `v2.bench.reference` runs without --reference or `ENV`
MODES = ("greedy", "sampled")
GOALS = {"batch_1": 0.6, "batch_n": 0.5}  # x the reference's time per row-frame (Engine V)


def reference_python() -> str:
    """The reference's python when no flag names one: `$V2_QWEN3_TTS_REFERENCE_PYTHON`, else this one."""
    return os.environ.get(PYTHON_ENV) or sys.executable


def qwen_tts_missing(python: str) -> str:
    """Why `python` cannot run the reference ("" when `qwen_tts`'s model imports there, as the worker imports it)."""
    probe = (f"import sys; sys.path.insert(0, {str(WORKER.parent)!r}); import reference_worker as w; "
             "w.stand_in_torchaudio(); from qwen_tts.core.models import Qwen3TTSForConditionalGeneration")
    return kit.import_missing(python, probe, lambda last: (
        f"the qwen_tts package is not importable by {python} ({last}): install qwen-tts there or name a python "
        f"that has it with ${PYTHON_ENV}"))


def not_a_checkpoint(path: Path) -> str:
    """Why `path` is not a Qwen3-TTS checkpoint in the release layout ("" when it is)."""
    return kit.not_a_checkpoint(path, "qwen3_tts",
                                f"a Qwen3-TTS checkpoint in the release layout, e.g. {CHECKPOINT}")


def check(path: Path) -> str:
    """Why the scenario cannot run on checkpoint `path` with the reference's python named by the environment
    ("" when it can)."""
    return not_a_checkpoint(path) or qwen_tts_missing(reference_python())


def _request(p: dict[str, Any], seed: int, frames: int, sampling: dict[str, Any] | None,
             penalty: float) -> dict[str, Any]:
    """One v2 request of a prompt (the text's own ids: the chat template's are the family's to add)."""
    return {"text_ids": p["ids"][3:-5], "speaker": p["speaker"], "language": p["language"], "text_feed": "whole",
            "seed": seed, "max_frames": frames, "min_frames": frames, "decode_audio": False,
            "repetition_penalty": penalty, **(sampling if sampling is not None else {"temperature": 0.0})}


@keeps_threads
def compare(reference: Path, python: str, *, frames: int = 64, batch: int = 16, repeat: int = 5,
            log: Callable[[str], None] = lambda s: None, modes: tuple[str, ...] = MODES,
            count_ops: bool = True) -> dict[str, Any]:
    """The scenario on checkpoint `reference`; per side: ms per row-frame (median, min) and the median paired
    ratio to the reference's run of the same batch and mode; `count_ops`: also the operations per frame step
    (`ops_per_frame_step`, None without). Raises AssertionError (after logging the report) when greedy codes
    that must be equal are not."""
    from v2.families.qwen3_tts.rows import embed_rows
    from v2.models.qwen3_tts.generate import generate_batch
    from v2.runtime import Runtime

    if batch < 2 or frames < 1 or repeat < 1:
        raise ValueError(f"batch must be >= 2, frames and repeat >= 1 (got {batch}, {frames}, {repeat})")
    torch.set_num_threads(1)
    sampling, penalty = settings(reference)
    asks = prompts(batch)
    is_fixture = reference.resolve() == CHECKPOINT.resolve()
    load_before = os.getloadavg()
    rt = Runtime.from_card(fixture_card(batch, frames), checkpoint=str(reference), device="cpu")
    ref: ReferenceProcess | None = None

    def req(mode: str, i: int) -> dict[str, Any]:
        return _request(asks[i], i, frames, None if mode == "greedy" else sampling, penalty)

    try:
        ref = ReferenceProcess(python, reference, asks, sampling, penalty, FIXTURE if is_fixture else None)
        family, model = rt.family, rt.model
        work = {m: [family.prepare(family.parse(req(m, i))) for i in range(batch)] for m in modes}
        with torch.no_grad():
            rows = [embed_rows(model, w.rows.to(model.device), None) for w in work[modes[0]]]  # [T_i, H]
            trailing = [model.embed_text(torch.tensor(w.trailing)) for w in work[modes[0]]]  # [Tt_i, H]

        def loop(mode: str, n: int, f: int) -> list[np.ndarray]:
            gens = generate_batch(model, rows[:n], trailing[:n], [w.sampling for w in work[mode][:n]],
                                  list(range(n)), max_new_tokens=f + 1, min_new_tokens=f + 1)
            return [g.codes.numpy() for g in gens]

        def serve(mode: str, n: int) -> list[np.ndarray]:
            handles = rt.submit_many([req(mode, i) for i in range(n)])
            return [np.asarray(h.result().codes) for h in handles]

        sides: dict[str, Callable[[str], list[np.ndarray]]] = {
            "generate_1": lambda m: loop(m, 1, frames), "runtime_1": lambda m: serve(m, 1),
            f"generate_{batch}": lambda m: loop(m, batch, frames), f"runtime_{batch}": lambda m: serve(m, batch)}
        order = kit.order(modes, batch)
        walls, codes = kit.time_sides(order, sides, ref, frames, repeat, log)
        ops = {f"{m}/{side}_{n}": ops_per_frame(lambda f: loop(m, n, f))
               if side == "generate" else ref.ops_per_frame(n, m == "greedy")
               for m in modes for n in (1, batch) for side in ("reference", "generate")} if count_ops else None
    finally:
        if ref is not None:
            ref.close()
        rt.close()
    report = kit.report(order, walls, codes, frames, batch, modes, GOALS)
    report.update({"ops_per_frame_step": ops, "repeat": repeat, "checkpoint": str(reference),
                   "sampled_settings": sampling, "repetition_penalty": penalty,
                   "stop": "masked at every choice on both sides (every row makes all its frames)",
                   "reference_python": python, "reference_versions": ref.ready if ref else None,
                   "reference_fixture_codes_equal": ref.ready.get("fixture_codes_equal") if ref else None,
                   "load_average_before": list(load_before), "load_average_after": list(os.getloadavg())})
    kit.assert_equal(report, log)
    return report


def main(argv: list[str] | None = None) -> int:
    """`python -m v2.families.qwen3_tts.bench.reference`: the scenario on `--checkpoint` (default: the tiny
    fixture's); the table, then one JSON line (`v2.bench.reference`'s), or the skip and its reason."""
    return kit.main(argv, family="qwen3_tts", doc=__doc__ or "", checkpoint=os.environ.get(ENV) or str(CHECKPOINT),
                    python_env=PYTHON_ENV, needs="qwen_tts", modes=MODES, reference_python=reference_python,
                    why=lambda path, python: not_a_checkpoint(path) or qwen_tts_missing(python), compare=compare)


if __name__ == "__main__":
    sys.exit(main())
