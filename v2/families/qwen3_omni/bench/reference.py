"""Qwen3-Omni against transformers' `Qwen3OmniMoeForConditionalGeneration.generate(..., return_audio=True)` on the
tiny fixture's checkpoint (`python -m v2.bench.reference --family qwen3_omni`, or `python -m
v2.families.qwen3_omni.bench.reference`).

Owns: the side-by-side scenario, float32 on the CPU, one intra-op thread on both sides, greedy thinker and talker
(the reference's `talker_do_sample=False`; v2's `temperature: 0`, `talker_temperature: 0`):
- one request: the fixture's text prompt through a one-request runtime against one `generate` (goal <= 0.5x);
- N requests (16): the fixture's four prompts cycled (text, system + user, audio input, conversation) submitted
  together against N sequential `generate` calls (the reference speaks one request at a time: its `generate`
  refuses a batch with audio output) (goal <= 0.2x);
timed in interleaved repetitions (the order rotates), each runtime side divided by the reference's run of the
same requests in the same repetition (paired ratios: this shared machine's speed drifts), medians reported with
the load average before and after. Outputs are checked, every request of every side: text ids and codes equal
the reference's, the waveform within the fixture's 1e-4; and the reference's own outputs at the fixture's caps
equal the stored ones (the worker's fixture check), so the reference is the one the parity tests hold v2 to.
`--frames` (v2's `max_frames`) and `--tokens` (v2's `max_tokens`): the reference gets one more of each (its
capped last token is never spoken and its capped last frame never completed).
The reference runs in a child process (reference_worker.py) under `$V2_QWEN3_OMNI_REFERENCE_PYTHON`
(`PYTHON_ENV`); `check` says why it cannot run (no checkpoint, or transformers' Qwen3-Omni not importable).
Must not know: model or engine internals (it calls `Runtime.submit_many`).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from v2.bench import reference_kit as kit
from v2.families.qwen3_omni.bench.reference_setup import (CHECKPOINT, ReferenceProcess, clip, fixture_card,
                                                          for_reference, omni_request, prompts)
from v2.bench.threads import keeps_threads

ENV, PYTHON_ENV = "V2_QWEN3_OMNI_REFERENCE", "V2_QWEN3_OMNI_REFERENCE_PYTHON"
DEFAULT_REFERENCE = CHECKPOINT
GOALS = {"batch_1": 0.5, "batch_n": 0.2}  # x the reference's time (issue 44 item 7)
EOS = 151645
TOKENS = 16


def reference_python() -> str:
    return os.environ.get(PYTHON_ENV) or sys.executable


def transformers_missing(python: str) -> str:
    probe = "import transformers; from transformers import Qwen3OmniMoeForConditionalGeneration"
    return kit.import_missing(python, probe, lambda last: (
        f"transformers' Qwen3-Omni is not importable by {python} ({last}): name a python that has it "
        f"(transformers >= 5.0.0) with ${PYTHON_ENV}"))


def not_a_checkpoint(path: Path) -> str:
    return kit.not_a_checkpoint(path, "qwen3_omni_moe", f"a Qwen3-Omni checkpoint, e.g. {CHECKPOINT}")


def check(path: Path) -> str:
    """Why the scenario cannot run on `path` with the environment's reference python ("" when it can)."""
    return not_a_checkpoint(path) or transformers_missing(reference_python())


def spoken(ids: list[int], tokens: int) -> list[int]:
    """The reference's new ids -> what v2 with `max_tokens=tokens` returns (no `<|im_end|>`, at most `tokens`)."""
    return ids[:-1] if ids and ids[-1] == EOS else ids[:tokens]


Outputs = list[tuple[list[int], np.ndarray, np.ndarray]]  # per request: (text ids, codes [F, 16], audio [n])


def equal(a: Outputs, b: Outputs) -> bool:
    return len(a) == len(b) and all(
        ta == tb and np.array_equal(ca, cb) and wa.shape == wb.shape and bool(np.allclose(wa, wb, atol=1e-4,
                                                                                           rtol=1e-4))
        for (ta, ca, wa), (tb, cb, wb) in zip(a, b))


@keeps_threads
def compare(reference: Path, python: str, *, frames: int = 32, batch: int = 16, repeat: int = 3,
            log: Callable[[str], None] = lambda s: None, tokens: int = TOKENS) -> dict[str, Any]:
    """The scenario on checkpoint `reference`: per side the wall seconds (median, min), ms per row-frame, the
    paired ratios; `codes`: which outputs are equal; `goals`. Raises AssertionError (after logging the report)
    when outputs that must be equal are not."""
    from v2.runtime import Runtime

    if batch < 2 or frames < 1 or tokens < 1 or repeat < 1:
        raise ValueError(f"batch must be >= 2, frames, tokens and repeat >= 1 (got {batch}, {frames}, {tokens}, "
                         f"{repeat})")
    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory(prefix="v2_qwen3_omni_bench_")
    ck = for_reference(reference, Path(tmp.name) / "checkpoint")
    ps, wave = prompts(batch), clip()
    load_before = os.getloadavg()
    rt = Runtime.from_card(fixture_card(batch), checkpoint=str(reference), device="cpu", dtype=torch.float32)
    ref: ReferenceProcess | None = None
    out: dict[str, Outputs] = {}
    walls: dict[str, list[float]] = {}
    keys = ["reference_1", "runtime_1", f"reference_{batch}", f"runtime_{batch}"]
    try:
        is_fixture = reference.resolve() == CHECKPOINT.resolve()
        ref = worker = ReferenceProcess(python, ck, ps, is_fixture)

        def serve(n: int) -> tuple[float, Outputs]:
            reqs = [omni_request(p, tokens, frames, wave) for p in ps[:n]]
            t0 = time.perf_counter()
            rs = [h.result() for h in rt.submit_many(reqs)]
            wall = time.perf_counter() - t0
            for r in rs:
                if r.error is not None:
                    raise RuntimeError(f"the runtime refused or failed a request: {r.error}")
            return wall, [(list(r.text_ids or ()), np.asarray(r.codes), np.asarray(r.audio[0])) for r in rs]

        def generate(n: int) -> tuple[float, Outputs]:
            wall, texts, codes, wavs = worker.generate(list(range(n)), tokens + 1, frames + 1)
            return wall, [(spoken(t, tokens), c, w) for t, c, w in zip(texts, codes, wavs)]

        def side(key: str) -> tuple[float, Outputs]:
            n = kit.side_rows(key)
            return serve(n) if key.startswith("runtime") else generate(n)

        serve(batch)  # warm-up; the reference's is its fixture check, else one short run
        if not is_fixture:
            worker.generate([0], 2, 2)
        walls = {k: [] for k in keys}
        for i in range(repeat):
            shift = i % len(keys)
            for key in keys[shift:] + keys[:shift]:
                wall, out[key] = side(key)
                walls[key].append(wall)
            log(f"  repetition {i + 1}/{repeat}: " + ", ".join(f"{k} {walls[k][-1]:.2f} s" for k in keys))
    finally:
        if ref is not None:
            ref.close()
        rt.close()
        tmp.cleanup()
    rows = []
    for key in keys:
        n = kit.side_rows(key)
        made = sum(c.shape[0] for _, c, _ in out[key])
        row: dict[str, Any] = {"side": key, "rows": n, "frames": made,
                               "text_tokens": sum(len(t) for t, _, _ in out[key]),
                               "wall_s_median": statistics.median(walls[key]), "wall_s_min": min(walls[key]),
                               "ms_per_row_frame_median": statistics.median(walls[key]) / max(made, 1) * 1e3}
        if key.startswith("runtime"):
            paired = [a / b for a, b in zip(walls[key], walls[f"reference_{n}"])]
            row["x_reference_median"], row["x_reference_each"] = statistics.median(paired), paired
        rows.append(row)
    x = {r["side"]: r["x_reference_median"] for r in rows if "x_reference_median" in r}
    report: dict[str, Any] = {
        "tokens": tokens, "frames": frames, "batch": batch, "repeat": repeat, "sides": rows,
        "codes": {"greedy_runtime_1_equals_reference_1": equal(out["runtime_1"], out["reference_1"]),
                  f"greedy_runtime_{batch}_equals_reference_{batch}": equal(out[f"runtime_{batch}"],
                                                                            out[f"reference_{batch}"])},
        "goals": {"runtime_1": {"x": x["runtime_1"], "goal": GOALS["batch_1"],
                                "met": x["runtime_1"] <= GOALS["batch_1"]},
                  f"runtime_{batch}": {"x": x[f"runtime_{batch}"], "goal": GOALS["batch_n"],
                                       "met": x[f"runtime_{batch}"] <= GOALS["batch_n"]}},
        "checkpoint": str(reference), "reference_python": python,
        "reference_torch": ref.ready.get("torch") if ref else None,
        "reference_transformers": ref.ready.get("transformers") if ref else None,
        "reference_fixture_codes_equal": ref.ready.get("fixture_equal") if ref else None,
        "load_average_before": list(load_before), "load_average_after": list(os.getloadavg())}
    kit.assert_equal(report, log)
    return report


def main(argv: list[str] | None = None) -> int:
    """`python -m v2.families.qwen3_omni.bench.reference`: the table, then one JSON line, or the skip."""
    return kit.main(argv, family="qwen3_omni", doc=__doc__ or "", checkpoint=os.environ.get(ENV) or str(CHECKPOINT),
                    python_env=PYTHON_ENV, needs="transformers' Qwen3-Omni", modes=("greedy",),
                    reference_python=reference_python,
                    why=lambda path, python: not_a_checkpoint(path) or transformers_missing(python),
                    compare=lambda path, python, modes, **kw: compare(path, python, **kw))


if __name__ == "__main__":
    sys.exit(main())
