"""`python -m v2.bench.reference`: v2's frame step against the reference implementation's own `generate()`.

Owns: the side-by-side scenario on one checkpoint (default: the tiny fixture), one intra-op thread on
every side, every row forced to the same number of frames, the card's sampling settings on both sides:
- batch 1: v2's `generate` and a one-request runtime against the reference's `generate()` of one prompt;
- batch N (16): v2's `generate_batch` and the runtime with N requests (with and without audio) against the
  reference's static batch of N prompts (left-padded, as its processor pads);
timed in interleaved repetitions (the order rotates each repetition), each v2 side divided by the
reference's run of the same batch in the same repetition (paired ratios: this shared machine's speed
drifts); medians reported, with the load average before and after. The reference runs in a child process
(`reference_worker.py`) under its own python, so its dependencies (transformers) never enter this
environment. Where the reference is (a local copy of the OpenMOSS/MOSS-TTS repository at 58b20a0):
`--reference DIR` or `$V2_MOSS_REFERENCE`; its python: `--reference-python` or `$V2_MOSS_REFERENCE_PYTHON`
(default: this one). Without a reference copy the scenario is skipped with a message saying so.
Also checks batched == alone on v2's side: the runtime's codes equal `generate_batch`'s row for row, and
row 0 of the batch equals the batch-1 run. One JSON line last.
Must not know: model or engine internals (it calls `generate`, `generate_batch`, `Runtime.submit_many`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
WORKER = Path(__file__).resolve().parent / "reference_worker.py"
REFERENCE_ENV, PYTHON_ENV = "V2_MOSS_REFERENCE", "V2_MOSS_REFERENCE_PYTHON"


class ReferenceProcess:
    """The reference's `generate()` in a child process: `run(batch, frames, seed)` -> wall seconds."""

    def __init__(self, python: str, reference: Path, checkpoint: Path, prompts: list[np.ndarray],
                 sampling: dict[str, Any], threads: int = 1) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="v2_reference_")
        file = Path(self._dir.name) / "prompts.npz"
        np.savez(file, **{f"rows_{i}": p for i, p in enumerate(prompts)})
        self.proc = subprocess.Popen(
            [python, str(WORKER), "--reference", str(reference), "--checkpoint", str(checkpoint), "--prompts",
             str(file), "--threads", str(threads), "--sampling", json.dumps(sampling)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.ready = self._reply()

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the reference worker exited ({self.proc.wait()}); "
                                   f"run {WORKER.name} by hand to see why")
            if line.startswith("{"):
                return json.loads(line)

    def run(self, batch: int, frames: int, seed: int = 0) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"batch": batch, "frames": frames, "seed": seed}) + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        if reply["frames"] != [frames] * batch:
            raise RuntimeError(f"the reference made {reply['frames']} frames, asked {frames} for each of {batch}")
        return float(reply["wall_s"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._dir.cleanup()


def fixture_prompts(n: int) -> list[torch.Tensor]:
    """n prompts alternating the fixture's two (102 and 92 rows)."""
    ref = np.load(FIXTURE / "moss_tts_local_tiny" / "reference.npz")
    two = [torch.from_numpy(ref["p1_input_ids"]), torch.from_numpy(ref["p2_input_ids"])]
    return [two[i % 2] for i in range(n)]


def reference_sampling(settings: Any) -> dict[str, Any]:
    """The reference's `generate()` keywords for v2's `SamplingSettings`."""
    return {"text_temperature": settings.stop.temperature, "text_top_k": settings.stop.top_k,
            "text_top_p": settings.stop.top_p, "audio_temperature": settings.audio.temperature,
            "audio_top_k": settings.audio.top_k, "audio_top_p": settings.audio.top_p,
            "audio_repetition_penalty": settings.repetition_penalty}


def compare(reference: Path, python: str, *, frames: int = 64, batch: int = 16, repeat: int = 5,
            log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The scenario; figures per side: ms per row-frame (median) and the median paired ratio to the reference."""
    from v2.card import load_card
    from v2.models.moss_tts_local.generate import generate, generate_batch
    from v2.runtime import Runtime
    from v2.runtime.device import HostStream

    torch.set_num_threads(1)
    card = load_card("moss_tts_local_tiny")
    card = card.model_copy(update={"runtime": card.runtime.model_copy(update={"cpu_threads": 1})})
    checkpoint = FIXTURE / "moss_tts_local_tiny" / "checkpoint"
    codec_checkpoint = FIXTURE / "moss_codec_tiny" / "checkpoint"
    rt = Runtime.from_card(card, checkpoint=str(checkpoint), codec_checkpoint=str(codec_checkpoint), device="cpu",
                           stream=HostStream())
    settings = card.loops.ar_decode.sampling.settings()
    prompts = fixture_prompts(batch)
    seeds = list(range(batch))
    load_before = os.getloadavg()
    ref = ReferenceProcess(python, reference, checkpoint, [p.numpy() for p in prompts], reference_sampling(settings))
    model = rt.model
    codes: dict[str, list[np.ndarray]] = {}

    def serve(n: int, audio: bool) -> list[np.ndarray]:
        handles = rt.submit_many([{"prompt_rows": p, "seed": s, "max_frames": frames, "min_frames": frames,
                                   "decode_audio": audio} for p, s in zip(prompts[:n], seeds[:n])])
        return [np.asarray(h.result().codes) for h in handles]

    sides: dict[str, tuple[int, Callable[[], list[np.ndarray]]]] = {
        "generate": (1, lambda: [generate(model, prompts[0], max_frames=frames, min_frames=frames, seed=0,
                                          sampling=settings).numpy()]),
        "runtime_1": (1, lambda: serve(1, False)),
        "generate_batch": (batch, lambda: [g.codes.numpy() for g in generate_batch(
            model, prompts, [settings] * batch, seeds, max_frames=frames, min_frames=frames)]),
        f"runtime_{batch}": (batch, lambda: serve(batch, False)),
        f"runtime_{batch}_audio": (batch, lambda: serve(batch, True)),
    }
    order = ["reference_1", "generate", "runtime_1", f"reference_{batch}", "generate_batch", f"runtime_{batch}",
             f"runtime_{batch}_audio"]
    try:
        for name, (n, work) in sides.items():  # warm up every side once
            work()
        ref.run(1, 4)
        ref.run(batch, 4)
        walls: dict[str, list[float]] = {k: [] for k in order}
        for i in range(repeat):
            rotated = order[i % len(order):] + order[: i % len(order)]
            for name in rotated:
                start = time.perf_counter()
                if name.startswith("reference_"):
                    ref.run(int(name.split("_")[1]), frames, seed=i)
                    walls[name].append(time.perf_counter() - start)
                else:
                    codes[name] = sides[name][1]()
                    walls[name].append(time.perf_counter() - start)
            log(f"  repetition {i + 1}/{repeat}: " + ", ".join(
                f"{k} {walls[k][-1] / frames / (1 if k.endswith('_1') or k == 'generate' else batch) * 1e3:.2f}"
                for k in order) + " ms per row-frame")
    finally:
        ref.close()
        rt.close()
    rows = []
    for name in order:
        n = 1 if name in ("reference_1", "generate", "runtime_1") else batch
        row: dict[str, Any] = {"side": name, "rows": n, "frames": frames,
                               "ms_per_row_frame_median": statistics.median(walls[name]) / frames / n * 1e3,
                               "ms_per_row_frame_min": min(walls[name]) / frames / n * 1e3}
        if not name.startswith("reference_"):
            paired = [a / b for a, b in zip(walls[name], walls[f"reference_{n}"])]
            row["x_reference_median"] = statistics.median(paired)
            row["x_reference_each"] = paired
        rows.append(row)
    def same(side: str) -> bool:
        return all(np.array_equal(a, b) for a, b in zip(codes[side], codes["generate_batch"]))

    equal = {
        "runtime_equals_generate_batch": same(f"runtime_{batch}"),
        "runtime_audio_equals_generate_batch": same(f"runtime_{batch}_audio"),
        "batch_row0_equals_alone": bool(np.array_equal(codes["generate_batch"][0], codes["generate"][0])
                                        and np.array_equal(codes["runtime_1"][0], codes["generate"][0])),
    }
    return {"frames": frames, "batch": batch, "repeat": repeat, "checkpoint": "tests/fixtures/moss_tts_local_tiny",
            "sampling": reference_sampling(settings), "reference": str(reference),
            "reference_torch": ref.ready.get("torch"),
            "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
            "sides": rows, "codes": equal}


def locate(reference: str | None, python: str | None) -> tuple[Path | None, str, str]:
    """(reference dir or None, its python, why it is skipped when None)."""
    ref = reference or os.environ.get(REFERENCE_ENV)
    py = python or os.environ.get(PYTHON_ENV) or sys.executable
    if not ref:
        return None, py, f"no reference copy given (--reference DIR or ${REFERENCE_ENV}): skipped"
    path = Path(ref)
    if not (path / "moss_tts_local_v1.5" / "modeling_moss_tts.py").is_file():
        return None, py, (f"{path} has no moss_tts_local_v1.5/modeling_moss_tts.py (a copy of OpenMOSS/MOSS-TTS "
                          "at 58b20a0): skipped")
    return path, py, ""


def table(report: dict[str, Any]) -> str:
    lines = [f"{'side':>20} {'rows':>4} {'ms/row-frame':>12} {'x reference':>11}"]
    for r in report["sides"]:
        x = f"{r['x_reference_median']:.3f}" if "x_reference_median" in r else "-"
        lines.append(f"{r['side']:>20} {r['rows']:>4} {r['ms_per_row_frame_median']:>12.3f} {x:>11}")
    lines.append(f"codes: {report['codes']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from v2.bench.__main__ import machine

    p = argparse.ArgumentParser(prog="python -m v2.bench.reference", description=__doc__.splitlines()[0])
    p.add_argument("--reference", default=None, help=f"a local copy of OpenMOSS/MOSS-TTS (default ${REFERENCE_ENV})")
    p.add_argument("--reference-python", default=None,
                   help=f"python with its dependencies (default ${PYTHON_ENV}, else this one)")
    p.add_argument("--frames", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    reference, python, why = locate(args.reference, args.reference_python)
    if reference is None:
        print(why, file=sys.stderr)
        print(json.dumps({"bench": "v2.reference", "skipped": why}))
        return 0
    report = compare(reference, python, frames=args.frames, batch=args.batch, repeat=args.repeat,
                     log=lambda s: print(s, file=sys.stderr))
    print(table(report))
    print(json.dumps({"bench": "v2.reference", "machine": machine("cpu"), **report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
