"""What both sides of CSM's comparison with transformers run (v2/families/csm/bench/reference.py): the prompts,
the sampled settings, the stop-free checkpoint copy, the card sized for the run, operations per frame step,
and transformers' side in a child process (`ReferenceProcess` driving `reference_worker.py`).

Owns: the fixture's paths, the four text-only prompts, `without_stop` (a spare id as `codebook_eos_token_id`),
`fixture_card` (the `csm_1b` card with a CPU-sized pool, one intra-op thread), and the child process's command
line (the process, its protocol and `ops_per_frame` are `v2.bench.reference_kit`'s).
Must not know: model or engine internals; timing and ratios (the scenario's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from v2.bench.reference_kit import WORKER_FLAGS, WorkerProcess
from v2.bench.reference_kit import ops_per_frame as ops_per_frame  # the families' name for it

FIXTURE = Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "csm_tiny"
CHECKPOINT = FIXTURE / "checkpoint"
WORKER = Path(__file__).resolve().parent / "reference_worker.py"


def prompts(n: int) -> list[list[int]]:
    """n text-only prompts (full ids, `<|begin_of_text|>` .. `<|end_of_text|>`) cycling the fixture's four
    turns: s0, s1 and ctx's two turns alone (11, 14, 13 and 11 rows)."""
    ref = np.load(FIXTURE / "reference.npz")
    ctx = ref["ctx_input_ids"].tolist()
    first_end = ctx.index(128001) + 1
    second = ctx.index(128000, first_end)
    four = [ref["s0_input_ids"].tolist(), ref["s1_input_ids"].tolist(), ctx[:first_end], ctx[second:]]
    return [four[i % 4] for i in range(n)]


def sampled_settings(checkpoint: Path) -> dict[str, Any]:
    """The sampled mode's settings for both sides: the checkpoint's generation_config.json (the reference's
    `generate` keywords; the same names are v2's flat request fields)."""
    gen = json.loads((checkpoint / "generation_config.json").read_text())
    keys = ("temperature", "top_k", "top_p")
    out = {k: gen[k] for k in keys if k in gen}
    out.update({f"depth_decoder_{k}": gen[f"depth_decoder_{k}"] for k in keys if f"depth_decoder_{k}" in gen})
    return out


def without_stop(checkpoint: Path, into: Path) -> Path:
    """A copy of `checkpoint` in `into` (weights linked) whose `codebook_eos_token_id` is a spare id that is
    never drawn, so every row makes its whole frame budget."""
    into.mkdir(parents=True, exist_ok=True)
    for f in checkpoint.iterdir():
        if f.name != "config.json":
            (into / f.name).symlink_to(f.resolve())
    config = json.loads((checkpoint / "config.json").read_text())
    config["codebook_eos_token_id"] = int(config["vocab_size"]) - 2
    (into / "config.json").write_text(json.dumps(config, indent=1))
    return into


class ReferenceProcess(WorkerProcess):
    """transformers' `generate` in a child process: `run(batch, frames, seed, greedy)` -> (wall s, codes)."""

    def __init__(self, python: str, checkpoint: Path, ids: list[list[int]], sampling: dict[str, Any],
                 fixture: Path | None, threads: int = 1) -> None:
        def command(file: Path) -> list[str]:
            cmd = [python, str(WORKER), "--checkpoint", str(checkpoint), "--prompts", str(file), "--threads",
                   str(threads), "--sampling", json.dumps(sampling), *WORKER_FLAGS]
            if fixture is not None:
                cmd += ["--fixture", str(fixture / "reference.npz"), "--fixture-checkpoint",
                        str(fixture / "checkpoint")]
            return cmd

        super().__init__("v2_csm_reference_", ids, command)


def fixture_card(batch: int, frames: int) -> Any:
    """The release card (`csm_1b`) sized for this CPU run: `batch` requests, `frames` frames, one thread; its own
    prefill chunk (256 rows: the 16 prompts' ~200 rows in one step, as the reference's batched `generate` prefills
    them; 64 staggered the requests over four steps, so the batch ran ~3 more frame steps than the frames)."""
    from v2.card import load_card

    card = load_card("csm_1b")
    buckets = sorted({1, 2, 4, 8, batch} | {b for b in (16,) if b <= batch})
    data = card.model_dump(by_alias=True)
    data["loops"]["backbone"].update(max_running=batch, max_prompt_rows=256, max_frames=max(frames, 8),
                                     kv_memory_fraction=None, kv_blocks=None, batch_buckets=buckets)
    data["loops"]["codec"].update(max_streams=batch, batch_buckets=buckets)
    data["runtime"] = dict(data.get("runtime") or {}, cpu_threads=1)
    return type(card).model_validate(data)
