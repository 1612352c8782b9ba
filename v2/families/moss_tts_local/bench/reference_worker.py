"""The reference implementation's own `generate()`, timed in a child process on request (a standalone script).

Run by `reference.py` (next to it) with the python of an environment that has the reference's dependencies
(torch, transformers): `python reference_worker.py --reference DIR --checkpoint DIR --prompts FILE.npz`,
where DIR is a local copy of the OpenMOSS/MOSS-TTS repository (58b20a0; its `moss_tts_local_v1.5/`
package is imported from there) and FILE.npz holds the prompt rows `rows_0 .. rows_{n-1}` ([T_i, 13]
int64). It loads the checkpoint in float32 with SDPA attention on both transformers, prints one JSON line
(`{"ready": ...}`), then answers each JSON line on stdin, `{"batch": B, "frames": F, "seed": S}`, with one
JSON line: the wall seconds of one `generate()` over the first B prompts (left-padded as the reference's
processor pads, one static batch), every row forced to F frames. The stop head still runs and samples
each frame (its cost is the reference's); only its decision is replaced by "continue".
Imports nothing from v2 (it runs under another environment); must not know v2's model or runtime.
"""

from __future__ import annotations

import sys
from pathlib import Path

# run as a script, its own folder comes first on sys.path, where a module could shadow the standard library
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

PACKAGE = "moss_tts_local_v1.5"


def load_reference(reference: Path, checkpoint: Path) -> Any:
    """The reference's `MossTTSLocalModel` from `checkpoint`, float32, SDPA attention, eval mode."""
    root = reference / PACKAGE
    if not (root / "modeling_moss_tts.py").is_file():
        raise SystemExit(f"--reference: {reference} has no {PACKAGE}/modeling_moss_tts.py")
    package = types.ModuleType("moss_reference")  # its __init__ imports the processor (torchaudio): skip it
    package.__path__ = [str(root)]
    sys.modules["moss_reference"] = package
    config_mod = importlib.import_module("moss_reference.configuration_moss_tts")
    model_mod = importlib.import_module("moss_reference.modeling_moss_tts")
    config = config_mod.MossTTSLocalConfig.from_pretrained(str(checkpoint))
    config.attn_implementation = "sdpa"  # the checkpoint names flash-attention (a GPU kernel)
    config.local_transformer_attn_implementation = "sdpa"
    model = model_mod.MossTTSLocalModel.from_pretrained(str(checkpoint), config=config, dtype=torch.float32)
    model.eval()
    original = model._sample_next_assistant_text_token
    keep_going = int(config.audio_assistant_slot_token_id)

    def forced_continue(*args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.full_like(original(*args, **kwargs), keep_going)  # the head's cost, not its decision

    model._sample_next_assistant_text_token = forced_continue
    return model


def left_padded(prompts: list[torch.Tensor], pad_id: int, pad_code: int) -> tuple[torch.Tensor, torch.Tensor]:
    """prompts [T_i, 13] -> input_ids [B, T, 13], attention_mask [B, T] (filler rows on the left, mask 0)."""
    t = max(int(p.shape[0]) for p in prompts)
    ids = torch.full((len(prompts), t, prompts[0].shape[1]), pad_code, dtype=torch.long)
    ids[..., 0] = pad_id
    mask = torch.zeros(len(prompts), t, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, t - p.shape[0]:] = p
        mask[i, t - p.shape[0]:] = True
    return ids, mask


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", type=Path, required=True)
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--prompts", type=Path, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sampling", default="{}", help="JSON: generate()'s sampling keywords")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_reference(args.reference, args.checkpoint)
    with np.load(args.prompts) as f:
        prompts = [torch.from_numpy(f[f"rows_{i}"]) for i in range(len(f.files))]
    sampling = json.loads(args.sampling)
    cfg = model.config
    print(json.dumps({"ready": True, "torch": torch.__version__, "prompts": len(prompts)}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        ids, mask = left_padded(prompts[: ask["batch"]], int(cfg.pad_token_id), int(cfg.audio_pad_token_id))
        torch.manual_seed(int(ask.get("seed", 0)))
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_frames=int(ask["frames"]), do_sample=True, **sampling)
        wall = time.perf_counter() - start
        frames = [int(o[1].shape[0]) - 1 for o in out]  # rows after the audio_start row
        print(json.dumps({"wall_s": wall, "frames": frames}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
