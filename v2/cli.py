"""Command line: `python -m v2 synth ...` synthesises speech for a text on a card's model and codec.

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

import soundfile as sf

from v2.card import DEFAULT_CARD, build_codec, build_model, build_tokenizer, load_card
from v2.models.prompt import build_prompt


def _synth(args: argparse.Namespace) -> int:
    card = load_card(args.card)
    model = build_model(card, checkpoint=args.checkpoint, device=args.device)
    codec = build_codec(card, checkpoint=args.codec_checkpoint, device=args.device)
    tokenizer = build_tokenizer(card, args.checkpoint)
    rows = build_prompt(tokenizer, model.cfg, args.text, language=args.language, instruction=args.instruction)
    if len(rows) > card.limits.max_prompt_rows:
        raise SystemExit(f"text: prompt of {len(rows)} rows exceeds the card's max_prompt_rows "
                         f"({card.limits.max_prompt_rows})")
    max_frames = args.max_frames or card.limits.max_frames
    if not 1 <= max_frames <= card.limits.max_frames:
        raise SystemExit(f"max_frames: must lie in [1, {card.limits.max_frames}], got {max_frames}")
    if not 0 <= args.min_frames <= max_frames:
        raise SystemExit(f"min_frames: must lie in [0, max_frames = {max_frames}], got {args.min_frames}")
    start = time.perf_counter()
    codes = model.generate(rows, max_frames=max_frames, min_frames=args.min_frames, seed=args.seed,
                           sampling=card.sampling.settings())
    generated = time.perf_counter()
    if len(codes):
        audio = codec.decode(codes.T[None])[0]  # [channels, samples]
    else:
        audio = torch.zeros(codec.cfg.channels, 0)
    decoded = time.perf_counter()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sf.write(out, audio.clamp(-1, 1).T.float().cpu().numpy(), codec.sample_rate, subtype="PCM_16")
    if args.codes_out:
        np.save(args.codes_out, codes.cpu().numpy())
    seconds = audio.shape[1] / codec.sample_rate
    print(json.dumps({"card": card.name, "out": str(out), "frames": len(codes), "audio_seconds": seconds,
                      "channels": audio.shape[0], "sample_rate": codec.sample_rate, "prompt_rows": len(rows),
                      "generate_seconds": round(generated - start, 3), "decode_seconds": round(decoded - generated, 3)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m v2", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    synth = sub.add_parser("synth", help="synthesise one text")
    synth.add_argument("--card", default=DEFAULT_CARD, help="card name in cards/ or a path to a card file")
    synth.add_argument("--checkpoint", default=None, help="model checkpoint directory (overrides the card's)")
    synth.add_argument("--codec-checkpoint", default=None, help="codec checkpoint directory (overrides the card's)")
    synth.add_argument("--text", default="Hello from v2, a runtime for dual autoregressive speech models.")
    synth.add_argument("--language", default=None)
    synth.add_argument("--instruction", default=None)
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--max-frames", type=int, default=0, help="0: the card's limit")
    synth.add_argument("--min-frames", type=int, default=0, help="ignore the stop decision before this many frames")
    synth.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    synth.add_argument("--out", default="out/speech.wav", help="where to write the audio (16-bit PCM wav)")
    synth.add_argument("--codes-out", default=None, help="also write the codes [F, 12] as .npy")
    args = parser.parse_args(argv)
    return _synth(args)


if __name__ == "__main__":
    sys.exit(main())
