"""What both sides of Qwen3-TTS's comparison with its reference run (v2/families/qwen3_tts/bench/reference.py):
the prompts, the settings, the card sized for the run, operations per frame step, and the reference's side in a
child process (`ReferenceProcess` driving `reference_worker.py`).

Owns: the fixture's paths, the custom-voice prompts (the fixture's six texts with four speakers cycling,
English, the whole text fed at once), `settings` (generation_config.json's sampling and repetition penalty),
`fixture_card` (the `qwen3_tts_tiny` card with a run-sized pool, one intra-op thread), and the child process's
command line (the process, its protocol and `ops_per_frame` are `v2.bench.reference_kit`'s).
Must not know: model or engine internals; timing and ratios (the scenario's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from v2.bench.reference_kit import WORKER_FLAGS, WorkerProcess
from v2.bench.reference_kit import ops_per_frame as ops_per_frame  # the families' name for it

FIXTURE = Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "qwen3_tts_tiny"
CHECKPOINT = FIXTURE / "checkpoint"
WORKER = Path(__file__).resolve().parent / "reference_worker.py"
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


class ReferenceProcess(WorkerProcess):
    """The reference's `generate` in a child process: `run(batch, frames, seed, greedy)` -> (wall s, codes)."""

    def __init__(self, python: str, checkpoint: Path, rows: list[dict[str, Any]], sampling: dict[str, Any],
                 penalty: float, fixture: Path | None, threads: int = 1) -> None:
        def command(file: Path) -> list[str]:
            cmd = [python, str(WORKER), "--checkpoint", str(checkpoint), "--prompts", str(file), "--threads",
                   str(threads), "--sampling", json.dumps(sampling), "--repetition-penalty", str(penalty),
                   *WORKER_FLAGS]
            if fixture is not None:
                cmd += ["--fixture", str(fixture / "reference.npz")]
            return cmd

        super().__init__("v2_qwen3_tts_reference_", rows, command)


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
