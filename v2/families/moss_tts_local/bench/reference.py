"""MOSS-TTS-Local's frame step against the reference implementation's own `generate()` (`python -m
v2.bench.reference`, `python -m v2.bench --reference DIR`).

Owns: the side-by-side scenario on one checkpoint (the tiny fixture), one intra-op thread on every side,
every row forced to the same number of frames, the card's sampling settings on both sides:
- batch 1: v2's `generate` and a one-request runtime against the reference's `generate()` of one prompt;
- batch N (16): v2's `generate_batch` and the runtime with N requests (with and without audio) against the
  reference's static batch of N prompts (left-padded, as its processor pads);
timed in interleaved repetitions (the order rotates each repetition), each v2 side divided by the
reference's run of the same batch in the same repetition (paired ratios: this shared machine's speed
drifts); medians reported, with the load average before and after. The reference runs in a child process
(`reference_worker.py`) under its own python, so its dependencies (transformers) never enter this
environment. Where the reference is (a local copy of the OpenMOSS/MOSS-TTS repository at 58b20a0):
`--reference DIR` or `$V2_MOSS_REFERENCE` (`ENV`); its python: `--reference-python` or
`$V2_MOSS_REFERENCE_PYTHON` (`PYTHON_ENV`; default: this one); `check(path)` says why a folder is not it.
Also checks batched == alone on v2's side: the runtime's codes equal `generate_batch`'s row for row, and
row 0 of the batch equals the batch-1 run. The command, the skip and the table are `v2.bench.reference`'s.
Must not know: model or engine internals (it calls `generate`, `generate_batch`, `Runtime.submit_many`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from v2.bench.threads import keeps_threads

FIXTURE = Path(__file__).resolve().parents[4] / "tests" / "fixtures"
WORKER = Path(__file__).resolve().parent / "reference_worker.py"
ENV, PYTHON_ENV = "V2_MOSS_REFERENCE", "V2_MOSS_REFERENCE_PYTHON"
PACKAGE = "moss_tts_local_v1.5"  # the reference's package inside that copy


class ReferenceProcess:
    """The reference's `generate()` in a child process: `run(batch, frames, seed)` -> wall seconds."""

    def __init__(self, python: str, reference: Path, checkpoint: Path, prompts: list[np.ndarray],
                 sampling: dict[str, Any], threads: int = 1) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="v2_reference_")
        file = Path(self._dir.name) / "prompts.npz"
        arrays: dict[str, Any] = {f"rows_{i}": p for i, p in enumerate(prompts)}
        np.savez(file, **arrays)
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


@keeps_threads
def compare(reference: Path, python: str, *, frames: int = 64, batch: int = 16, repeat: int = 5,
            log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The scenario; figures per side: ms per row-frame (median) and the median paired ratio to the reference."""
    from v2.card import load_card
    from v2.families.moss_tts_local.card import MossCard
    from v2.models.moss_tts_local.generate import generate, generate_batch
    from v2.runtime import Runtime
    from v2.runtime.device import HostStream

    torch.set_num_threads(1)
    card = load_card("moss_tts_local_tiny")
    assert isinstance(card, MossCard)
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


def check(path: Path) -> str:
    """Why `path` is not a copy of the reference ("" when it is)."""
    if not (path / PACKAGE / "modeling_moss_tts.py").is_file():
        return f"{path} has no {PACKAGE}/modeling_moss_tts.py (a copy of OpenMOSS/MOSS-TTS at 58b20a0)"
    return ""
