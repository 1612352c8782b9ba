"""Command line: `python -m v2 synth ...` synthesises speech codes for a text on a card's model.

Owns: argument parsing, card/model/tokenizer set-up for one job, writing the result.
Must not know: model internals beyond the public entry points.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from v2.card import DEFAULT_CARD, build_model, build_tokenizer, load_card
from v2.models.prompt import build_prompt


def _synth(args: argparse.Namespace) -> int:
    card = load_card(args.card)
    model = build_model(card, checkpoint=args.checkpoint, device=args.device)
    tokenizer = build_tokenizer(card, args.checkpoint)
    rows = build_prompt(tokenizer, model.cfg, args.text, language=args.language, instruction=args.instruction)
    if len(rows) > card.limits.max_prompt_rows:
        raise SystemExit(f"text: prompt of {len(rows)} rows exceeds the card's max_prompt_rows "
                         f"({card.limits.max_prompt_rows})")
    max_frames = args.max_frames or card.limits.max_frames
    if not 1 <= max_frames <= card.limits.max_frames:
        raise SystemExit(f"max_frames: must lie in [1, {card.limits.max_frames}], got {max_frames}")
    start = time.perf_counter()
    codes = model.generate(rows, max_frames=max_frames, seed=args.seed, sampling=card.sampling.settings())
    elapsed = time.perf_counter() - start
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out, codes.cpu().numpy())
    seconds = len(codes) / 12.5
    print(json.dumps({"card": card.name, "out": str(out), "frames": len(codes), "audio_seconds": seconds,
                      "prompt_rows": len(rows), "generate_seconds": round(elapsed, 3)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m v2", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    synth = sub.add_parser("synth", help="synthesise one text")
    synth.add_argument("--card", default=DEFAULT_CARD, help="card name in cards/ or a path to a card file")
    synth.add_argument("--checkpoint", default=None, help="checkpoint directory (overrides the card's)")
    synth.add_argument("--text", default="Hello from v2, a runtime for dual autoregressive speech models.")
    synth.add_argument("--language", default=None)
    synth.add_argument("--instruction", default=None)
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--max-frames", type=int, default=0, help="0: the card's limit")
    synth.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    synth.add_argument("--out", default="out/codes.npy", help="where to write the codes [F, 12]")
    args = parser.parse_args(argv)
    return _synth(args)


if __name__ == "__main__":
    sys.exit(main())
