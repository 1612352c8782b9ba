"""What both sides of Qwen3-Omni's comparison with transformers run (v2/families/qwen3_omni/bench/reference.py):
the fixture's paths and prompts, the checkpoint copy transformers 5.0.0 reads, the card sized for the run, the
requests, and transformers' side in a child process (`ReferenceProcess` driving `reference_worker.py`).

Owns: the four fixture prompts cycled to N (text, system + user, audio input, conversation), `for_reference` (a
copy of the checkpoint whose config.json spells what 5.0.0 reads: the talker's `num_experts` beside the
release's `num_local_experts`, and `mrope_interleaved` beside `interleaved`; weights linked, nothing else
changed), `fixture_card` (the release card with one intra-op thread), `omni_request` (the greedy request whose
outputs equal a capped reference run: v2 speaks every token it returns, the reference never speaks its capped
last one, so the reference gets one more token and one more frame than v2's caps).
Must not know: model or engine internals; timing and ratios (the scenario's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from v2.bench.reference_kit import WorkerProcess

FIXTURE = Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "qwen3_omni_tiny"
CHECKPOINT = FIXTURE / "checkpoint"
WORKER = Path(__file__).resolve().parent / "reference_worker.py"
FIXTURE_CAPS = (10, 16)  # the fixture's thinker_max_new_tokens and talker_max_new_tokens


def prompts(n: int) -> list[dict[str, Any]]:
    """n prompts cycling the fixture's four (`key`, `input_ids`, `speaker`, `audio`: whether it has the clip)."""
    meta = json.loads((FIXTURE / "meta.json").read_text())
    four = [{"key": p["key"], "input_ids": p["input_ids"], "speaker": p["speaker"], "audio": p["key"] == "c"}
            for p in meta["prompts"]]
    return [four[i % 4] for i in range(n)]


def clip() -> np.ndarray:
    """The audio prompt's 16 kHz clip (the one the fixture's log-mel was made from)."""
    with np.load(FIXTURE / "reference.npz") as ref:
        return np.asarray(ref["c_audio_wave_16k"], dtype=np.float32)


def omni_request(prompt: dict[str, Any], tokens: int, frames: int, wave: np.ndarray) -> dict[str, Any]:
    """v2's greedy request for `prompt`: at most `tokens` text tokens and `frames` frames."""
    out: dict[str, Any] = {"prompt_ids": prompt["input_ids"], "speaker": prompt["speaker"], "temperature": 0.0,
                           "talker_temperature": 0.0, "max_tokens": tokens, "max_frames": frames}
    if prompt["audio"]:
        out["audio"] = [(wave, 16000)]
    return out


def for_reference(checkpoint: Path, into: Path) -> Path:
    """A copy of `checkpoint` in `into` (weights linked) whose config.json also spells the talker's expert count
    and interleaving the way transformers 5.0.0 reads them."""
    into.mkdir(parents=True, exist_ok=True)
    for f in checkpoint.iterdir():
        if f.name != "config.json":
            (into / f.name).symlink_to(f.resolve())
    config = json.loads((checkpoint / "config.json").read_text())
    text = config["talker_config"]["text_config"]
    if "num_local_experts" in text:
        text.setdefault("num_experts", text["num_local_experts"])
    rope = text.get("rope_parameters") or {}
    if "interleaved" in rope:
        rope.setdefault("mrope_interleaved", rope["interleaved"])
    (into / "config.json").write_text(json.dumps(config, indent=1))
    return into


class ReferenceProcess(WorkerProcess):
    """transformers' `generate(return_audio=True)` in a child process, one prompt at a time."""

    def __init__(self, python: str, checkpoint: Path, ps: list[dict[str, Any]], check_fixture: bool,
                 threads: int = 1) -> None:
        def command(file: Path) -> list[str]:
            cmd = [python, str(WORKER), "--checkpoint", str(checkpoint), "--prompts", str(file), "--fixture",
                   str(FIXTURE / "reference.npz"), "--threads", str(threads)]
            return cmd + (["--fixture-caps", json.dumps(list(FIXTURE_CAPS))] if check_fixture else [])

        super().__init__("v2_qwen3_omni_reference_", ps, command)
        self.out = Path(self._dir.name) / "wavs.npz"

    def generate(self, indices: list[int], tokens: int, frames: int
                 ) -> tuple[float, list[list[int]], list[np.ndarray], list[np.ndarray]]:
        """The prompts `indices` one after another: (wall s of the generate calls, new text ids, codes [F, 16],
        waveforms), `tokens` / `frames` being the reference's own caps."""
        reply = self._ask({"prompts": indices, "tokens": tokens, "frames": frames, "out": str(self.out)})
        with np.load(self.out) as w:
            wavs = [np.asarray(w[f"wav_{n}"]) for n in range(len(indices))]
        codes = [np.asarray(c, dtype=np.int64).reshape(-1, 16) for c in reply["codes"]]
        return float(reply["wall_s"]), reply["text_ids"], codes, wavs


def fixture_card(batch: int) -> Any:
    """The release card (`qwen3_omni_30b_a3b_instruct`) with one intra-op thread (as the reference) and room
    for `batch` requests at once."""
    from v2.card import load_card

    card = load_card("qwen3_omni_30b_a3b_instruct")
    data = card.model_dump(by_alias=True)
    for loop in ("thinker", "talker"):
        data["loops"][loop]["max_running"] = max(batch, data["loops"][loop]["max_running"])
    data["runtime"] = dict(data.get("runtime") or {}, cpu_threads=1)
    return type(card).model_validate(data)
