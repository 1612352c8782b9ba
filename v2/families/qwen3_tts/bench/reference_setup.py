"""What both sides of Qwen3-TTS's comparison with its reference run (v2/families/qwen3_tts/bench/reference.py):
the prompts, the settings, the card sized for the run, operations per frame step, and the reference's side in a
child process (`ReferenceProcess` driving `reference_worker.py`).

Owns: the fixture's paths, the custom-voice prompts (the fixture's six texts with four speakers cycling,
English, the whole text fed at once), `settings` (generation_config.json's sampling and repetition penalty),
`fixture_card` (the `qwen3_tts_tiny` card with a run-sized pool, one intra-op thread), `ops_per_frame` (aten
operations that launch work, counted as `v2.bench.launches` counts them: the same view and allocation
operations left out on both sides), and the child process's protocol.
Must not know: model or engine internals; timing and ratios (the scenario's).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from v2.bench.launches import NO_LAUNCH, LaunchCounter

FIXTURE = Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "qwen3_tts_tiny"
CHECKPOINT = FIXTURE / "checkpoint"
WORKER = Path(__file__).resolve().parent / "reference_worker.py"
COUNT_FRAMES = (2, 4)  # ops per frame step = the difference of two runs' counts / 2 (the prefill cancels)
KEYS = ("cv", "cvd", "vd", "xv", "icl", "icln")
SPEAKERS = ("Vivian", "Ryan", "Serena", "Aiden")
LANGUAGE = "English"


def prompts(n: int) -> list[dict[str, Any]]:
    """n custom-voice prompts: the fixture's six texts (full ids, chat template included) cycling, with four
    speakers cycling, English."""
    ref = np.load(FIXTURE / "reference.npz")
    texts = [ref[f"{k}_input_ids"].tolist() for k in KEYS]
    return [{"ids": texts[i % len(texts)], "speaker": SPEAKERS[i % len(SPEAKERS)], "language": LANGUAGE}
            for i in range(n)]


def settings(checkpoint: Path) -> tuple[dict[str, Any], float]:
    """(the sampled mode's settings, the repetition penalty of both modes) from the checkpoint's
    generation_config.json; the names are the reference's `generate` keywords and v2's request fields."""
    gen = json.loads((checkpoint / "generation_config.json").read_text())
    keys = ("temperature", "top_k", "top_p", "subtalker_temperature", "subtalker_top_k", "subtalker_top_p")
    return {k: gen[k] for k in keys if k in gen}, float(gen.get("repetition_penalty", 1.0))


class ReferenceProcess:
    """The reference's `generate` in a child process: `run(batch, frames, seed, greedy)` -> (wall s, codes)."""

    def __init__(self, python: str, checkpoint: Path, rows: list[dict[str, Any]], sampling: dict[str, Any],
                 penalty: float, fixture: Path | None, threads: int = 1) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="v2_qwen3_tts_reference_")
        file = Path(self._dir.name) / "prompts.json"
        file.write_text(json.dumps(rows))
        cmd = [python, str(WORKER), "--checkpoint", str(checkpoint), "--prompts", str(file), "--threads",
               str(threads), "--sampling", json.dumps(sampling), "--repetition-penalty", str(penalty),
               "--no-launch", json.dumps(sorted(NO_LAUNCH)), "--count-frames", json.dumps(list(COUNT_FRAMES))]
        if fixture is not None:
            cmd += ["--fixture", str(fixture / "reference.npz")]
        self._err = open(Path(self._dir.name) / "stderr.txt", "w+")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True)
        self.ready = self._reply()

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self._err.seek(0)
                tail = self._err.read()[-1500:]
                raise RuntimeError(f"the reference worker exited ({self.proc.wait()}): {tail}")
            if line.startswith("{"):
                return json.loads(line)  # type: ignore[no-any-return]

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def run(self, batch: int, frames: int, seed: int, greedy: bool) -> tuple[float, list[np.ndarray]]:
        reply = self._ask({"batch": batch, "frames": frames, "seed": seed, "greedy": greedy})
        if reply["frames"] != [frames] * batch:
            raise RuntimeError(f"the reference made {reply['frames']} frames, asked {frames} for each of {batch}")
        return float(reply["wall_s"]), [np.asarray(c, dtype=np.int64) for c in reply["codes"]]

    def ops_per_frame(self, batch: int, greedy: bool) -> float:
        """The reference's aten operations per frame step (counted as `ops_per_frame` counts v2's)."""
        return float(self._ask({"count": True, "batch": batch, "greedy": greedy})["ops_per_frame"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._err.close()
        self._dir.cleanup()


def fixture_card(batch: int, frames: int) -> Any:
    """The tiny card (`qwen3_tts_tiny`) sized for this CPU run: `batch` requests, `frames` frames, one thread."""
    from v2.card import load_card

    card = load_card("qwen3_tts_tiny")
    buckets = sorted({1, 2, 4, 8, batch} | {b for b in (16,) if b <= batch})
    data = card.model_dump(by_alias=True)
    data["loops"]["talker"].update(max_running=batch, max_frames=max(frames, 8), batch_buckets=buckets)
    data["loops"]["codec"].update(max_streams=batch, batch_buckets=buckets)
    data["runtime"] = dict(data.get("runtime") or {}, cpu_threads=1)
    return type(card).model_validate(data)


def ops_per_frame(run: Callable[[int], Any]) -> float:
    """aten operations per frame step of `run(frames)` (a loop over `frames` frames), no-grad."""
    counts = []
    with torch.no_grad():
        for frames in COUNT_FRAMES:
            counter = LaunchCounter()
            with counter:
                run(frames)
            counts.append(sum(counter.ops.values()))
    return (counts[1] - counts[0]) / (COUNT_FRAMES[1] - COUNT_FRAMES[0])
