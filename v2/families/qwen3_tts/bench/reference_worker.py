"""The reference side of Qwen3-TTS's comparison: the `qwen_tts` package's (QwenLM/Qwen3-TTS)
`Qwen3TTSForConditionalGeneration.generate`, run in a child process under the reference's python (`python
reference_worker.py --checkpoint DIR --prompts FILE`).

Owns: loading the checkpoint with `qwen_tts` (float32, CPU, its default attention), one intra-op thread, the
custom-voice prompts (text ids, speaker, language; `non_streaming_mode=True`, the custom-voice API's default;
the reference builds the rows and left-pads them itself), the two modes (greedy: `do_sample=False,
subtalker_dosample=False`; sampled: the given settings; the repetition penalty given in both), every row forced
to the whole budget (the talker's `min_new_tokens`, which the release fixes at 2, set to `max_new_tokens` by
wrapping `talker.generate`: EOS masked at every choice, as the fixture's forced-continue references), and the
fixture check: with `--fixture NPZ`, the greedy free run of the fixture's `cv` prompt (no forcing, p = 1,
budget 10) against the stored codes. `qwen_tts` imports its 25 Hz tokenizer, which imports torchaudio; where
torchaudio cannot load (no build for this torch), an empty stand-in module is registered: the 12 Hz talker's
`generate` never calls it. Protocol: one JSON line on stdout when ready (`torch`, `transformers`, `qwen_tts`,
`fixture_codes_equal`), then per stdin line `{"batch", "frames", "seed", "greedy"}` one JSON line back:
`wall_s` (the `generate` call alone), `frames` per row, `codes` [B][F][G]; `{"count": true, "batch",
"greedy"}`: `ops_per_frame`.
Must not know: v2 (this file imports only torch, numpy, transformers and qwen_tts, so it runs in any
environment that has them).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import sys
import time
import types
from importlib.metadata import version
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode


def stand_in_torchaudio() -> bool:
    """Registers an empty `torchaudio.compliance.kaldi` where torchaudio cannot be imported; True if it did."""
    try:
        import torchaudio.compliance.kaldi  # noqa: F401
        return False
    except Exception:
        for name in ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"):
            module = types.ModuleType(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = module
        return True


class OpCounter(TorchDispatchMode):
    """Counts aten operations that are not in `skip` (views, allocations)."""

    def __init__(self, skip: set[str]) -> None:
        super().__init__()
        self.skip, self.count = skip, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func.overloadpacket.__name__ not in self.skip:
            self.count += 1
        return func(*args, **(kwargs or {}))


def modes(sampling: dict[str, Any], penalty: float) -> dict[bool, dict[str, Any]]:
    """`generate` keywords per mode (True: greedy), every setting given explicitly."""
    return {True: {"do_sample": False, "subtalker_dosample": False, "repetition_penalty": penalty},
            False: {"do_sample": True, "subtalker_dosample": True, "repetition_penalty": penalty, **sampling}}


def force_budget(model: Any) -> None:
    """Every row runs its whole budget: the talker's `min_new_tokens` becomes its `max_new_tokens`."""
    inner = model.talker.generate

    def forced(*args: Any, **kwargs: Any) -> Any:
        kwargs["min_new_tokens"] = kwargs["max_new_tokens"]
        return inner(*args, **kwargs)

    model.talker.generate = forced


def fixture_check(model: Any, npz: str) -> dict[str, bool]:
    """The fixture's greedy free run of `cv` (Vivian, English, non-streaming, p = 1, budget 10): codes equal."""
    ref = np.load(npz)
    ids = torch.from_numpy(ref["cv_input_ids"])[None]  # [1, n]
    codes, _ = model.generate(input_ids=[ids], languages=["English"], speakers=["Vivian"], non_streaming_mode=True,
                              max_new_tokens=10, do_sample=False, subtalker_dosample=False, repetition_penalty=1.0)
    return {"cv": bool(np.array_equal(codes[0].numpy(), ref["cv_free_codes"]))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--prompts", required=True, help='a JSON file: a list of {"ids", "speaker", "language"}')
    p.add_argument("--sampling", default="{}", help="the sampled mode's generate keywords (JSON)")
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fixture", default=None, help="reference.npz of the checkpoint's fixture, to check codes")
    p.add_argument("--no-launch", default="[]", help="aten operations not counted (JSON list)")
    p.add_argument("--count-frames", default="[2, 4]", help="the two frame budgets operations are counted at")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    stood_in = stand_in_torchaudio()
    import transformers
    from transformers.utils import logging

    from qwen_tts.core.models import Qwen3TTSForConditionalGeneration

    logging.set_verbosity_error()
    model = Qwen3TTSForConditionalGeneration.from_pretrained(args.checkpoint, dtype=torch.float32).eval()
    with open(args.prompts) as f:
        prompts: list[dict[str, Any]] = json.load(f)
    kwargs = modes(json.loads(args.sampling), args.repetition_penalty)
    ready: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                             "qwen_tts": version("qwen-tts"), "torchaudio_stand_in": stood_in}
    with torch.no_grad():
        if args.fixture:
            ready["fixture_codes_equal"] = fixture_check(model, args.fixture)
        force_budget(model)
        print(json.dumps(ready), flush=True)
        skip, (f0, f1) = set(json.loads(args.no_launch)), json.loads(args.count_frames)

        def run(batch: int, frames: int, greedy: bool) -> list[torch.Tensor]:
            rows = prompts[:batch]
            codes, _ = model.generate(input_ids=[torch.tensor([r["ids"]]) for r in rows],
                                      languages=[r["language"] for r in rows], speakers=[r["speaker"] for r in rows],
                                      non_streaming_mode=True, max_new_tokens=frames + 1, **kwargs[greedy])
            return list(codes)  # B x [F, G]: the last group-0 choice's frame is never completed

        for line in sys.stdin:
            ask = json.loads(line)
            if ask.get("count"):
                counts = []
                for frames in (f0, f1):
                    counter = OpCounter(skip)
                    with counter:
                        run(int(ask["batch"]), frames, bool(ask["greedy"]))
                    counts.append(counter.count)
                print(json.dumps({"ops_per_frame": (counts[1] - counts[0]) / (f1 - f0)}), flush=True)
                continue
            torch.manual_seed(int(ask["seed"]))
            start = time.perf_counter()
            codes = run(int(ask["batch"]), int(ask["frames"]), bool(ask["greedy"]))
            wall = time.perf_counter() - start
            print(json.dumps({"wall_s": wall, "frames": [int(c.shape[0]) for c in codes],
                              "codes": [c.tolist() for c in codes]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
