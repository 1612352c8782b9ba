"""The reference side of CSM's comparison: transformers' `CsmForConditionalGeneration.generate`, run in a
child process under the reference's python (`python reference_worker.py --checkpoint DIR --prompts FILE`).

Owns: loading the checkpoint with transformers (float32, CPU, its default attention), one intra-op thread,
the prompts' left padding (the processor's: pad id `pad_token_id`, attention mask 0 there), the two modes
(greedy: `do_sample=False, depth_decoder_do_sample=False`; sampled: the given settings for both heads, every
keyword passed on every call, since transformers keeps `depth_decoder_*` keywords between calls), and the
fixture check: with `--fixture NPZ`, the greedy runs of the fixture's s0, s1 and ctx prompts (ctx with its
context audio) against the stored codes. Protocol: one JSON line on stdout when ready (`torch`,
`transformers`, `fixture_codes_equal`), then per stdin line `{"batch", "frames", "seed", "greedy"}` one JSON
line back: `wall_s` (the `generate` call alone), `frames` per row, `codes` [B][F][N].
Must not know: v2 (this file imports only torch, numpy and transformers, so it runs in any environment that
has them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode


def left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Id lists -> left-padded ids [B, T] and the attention mask [B, T] (0 on the padding)."""
    t = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), t), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, t - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, t - len(p):] = 1
    return ids, mask


def made(codes: torch.Tensor, codebook_eos: int) -> list[int]:
    """Frames each row made [B, F, N] -> per row: up to its first stop frame (codebooks 0..N-2 all
    `codebook_eos`) included, else F (a stopped row gets pad frames while the others go on)."""
    stop = (codes[:, :, :-1] == codebook_eos).all(-1)  # [B, F]
    return [int(s.nonzero()[0, 0]) + 1 if bool(s.any()) else int(codes.shape[1]) for s in stop]


class OpCounter(TorchDispatchMode):
    """Counts aten operations that are not in `skip` (views, allocations)."""

    def __init__(self, skip: set[str]) -> None:
        super().__init__()
        self.skip, self.count = skip, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func.overloadpacket.__name__ not in self.skip:
            self.count += 1
        return func(*args, **(kwargs or {}))


def modes(sampling: dict[str, Any]) -> dict[bool, dict[str, Any]]:
    """`generate` keywords per mode (True: greedy), both heads' settings given explicitly every call."""
    return {True: {"do_sample": False, "depth_decoder_do_sample": False},
            False: {"do_sample": True, "depth_decoder_do_sample": True, **sampling}}


def fixture_check(model: Any, npz: str) -> dict[str, bool]:
    """The fixture's greedy references (s0, s1, ctx) through this transformers: codes equal per prompt."""
    ref = np.load(npz)
    out: dict[str, bool] = {}
    for key in ("s0", "s1", "ctx"):
        ids = torch.from_numpy(ref[f"{key}_input_ids"])[None]  # [1, T]
        kw: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if key == "ctx":
            wav = torch.from_numpy(ref["ctx_context_wav"])
            kw["input_values"] = wav[None, None]  # [1, 1, samples]
            kw["input_values_cutoffs"] = torch.tensor([[wav.shape[0], -1]])
        want = ref[f"{key}_gen_codes"]
        got = model.generate(**kw, do_sample=False, depth_decoder_do_sample=False, max_new_tokens=8)
        out[key] = bool(np.array_equal(got[0].numpy(), want))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--prompts", required=True, help="a JSON file: a list of id lists")
    p.add_argument("--sampling", default="{}", help="the sampled mode's generate keywords (JSON)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fixture", default=None, help="reference.npz of the checkpoint's fixture, to check codes")
    p.add_argument("--fixture-checkpoint", default=None, help="the fixture's own checkpoint (for --fixture)")
    p.add_argument("--no-launch", default="[]", help="aten operations not counted (JSON list)")
    p.add_argument("--count-frames", default="[2, 4]", help="the two frame budgets operations are counted at")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import transformers
    from transformers import CsmForConditionalGeneration
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()

    def load(path: str) -> Any:
        return CsmForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()

    with open(args.prompts) as f:
        prompts: list[list[int]] = json.load(f)
    kwargs = modes(json.loads(args.sampling))
    ready: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__}
    with torch.no_grad():
        if args.fixture:
            ready["fixture_codes_equal"] = fixture_check(load(args.fixture_checkpoint or args.checkpoint), args.fixture)
        model = load(args.checkpoint)
        pad_id, eos = int(model.config.pad_token_id), int(model.config.codebook_eos_token_id)
        print(json.dumps(ready), flush=True)
        skip, (f0, f1) = set(json.loads(args.no_launch)), json.loads(args.count_frames)
        for line in sys.stdin:
            ask = json.loads(line)
            ids, mask = left_padded(prompts[: ask["batch"]], pad_id)
            if ask.get("count"):
                counts = []
                for frames in (f0, f1):
                    counter = OpCounter(skip)
                    with counter:
                        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=frames,
                                       **kwargs[bool(ask["greedy"])])
                    counts.append(counter.count)
                print(json.dumps({"ops_per_frame": (counts[1] - counts[0]) / (f1 - f0)}), flush=True)
                continue
            torch.manual_seed(int(ask["seed"]))
            start = time.perf_counter()
            codes = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=int(ask["frames"]),
                                   **kwargs[bool(ask["greedy"])])  # [B, F, N]
            wall = time.perf_counter() - start
            print(json.dumps({"wall_s": wall, "frames": made(codes, eos),
                              "codes": codes.tolist()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
