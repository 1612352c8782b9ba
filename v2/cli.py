"""Command line: `python -m v2 synth "text" -o out.wav` speaks a text through the runtime (a cloned voice with
`--reference speaker.wav` or `--voice NAME`); `python -m v2 voices add|list|remove` manages stored voices;
`python -m v2 serve` serves it over HTTP (v2/server).

Owns: argument parsing, one runtime for the job, a progress bar on stderr fed by the stream's chunks,
and writing the wav (16-bit PCM; with --stream, written chunk by chunk as the audio arrives).
Must not know: model internals, scheduling.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from v2.card import DEFAULT_CARD
from v2.loops.vocoder import AudioChunk
from v2.request import RequestError
from v2.runtime import Runtime
from v2.server.options import add_arguments as add_serve_arguments

DEFAULT_TEXT = "Hello from v2, a runtime for dual autoregressive speech models."


class Progress:
    """A one-line bar: seconds of audio made so far against the request's frame budget."""

    def __init__(self, budget_seconds: float, enabled: bool) -> None:
        self.budget, self.enabled, self.made = budget_seconds, enabled, 0.0
        self.start = time.perf_counter()

    def update(self, chunk: AudioChunk) -> None:
        self.made += chunk.audio.shape[1] / chunk.sample_rate
        if self.enabled:
            width = 30
            filled = min(width, int(width * self.made / self.budget)) if self.budget else width
            bar = "#" * filled + "." * (width - filled)
            sys.stderr.write(f"\r[{bar}] {self.made:6.2f} s of audio, {time.perf_counter() - self.start:6.2f} s")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _runtime(args: argparse.Namespace) -> Runtime:
    return Runtime.from_card(args.card, checkpoint=args.checkpoint, codec_checkpoint=args.codec_checkpoint,
                             device=args.device, voices_dir=args.voices_dir)


def _voice_fields(args: argparse.Namespace) -> dict:
    fields: dict = {}
    if args.reference:
        fields["reference_audio"] = args.reference if len(args.reference) > 1 else args.reference[0]
    if args.reference_text is not None:
        fields["reference_text"] = args.reference_text
    if args.voice is not None:
        fields["voice"] = args.voice
    return fields


def _voices(args: argparse.Namespace) -> int:
    runtime = _runtime(args)
    try:
        store = runtime.voices
        if args.action == "add":
            try:
                voice = store.add(args.name, args.audio, text=args.text)
            except ValueError as e:
                raise SystemExit(str(e)) from None
            print(json.dumps(voice.info()))
        elif args.action == "remove":
            try:
                store.remove(args.name)
            except ValueError as e:
                raise SystemExit(str(e)) from None
        else:
            for voice in store.list():
                print(json.dumps(voice.info()))
        for problem in store.errors:
            print(f"skipped a corrupt voice entry: {problem}", file=sys.stderr)
        return 0
    finally:
        runtime.close()


def _synth(args: argparse.Namespace) -> int:
    runtime = _runtime(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        request = {"text": args.text, "seed": args.seed, "min_frames": args.min_frames, "stream": True,
                   "language": args.language, "instruction": args.instruction, **_voice_fields(args)}
        if args.max_frames:
            request["max_frames"] = args.max_frames
        try:
            handle = runtime.submit(request)
        except RequestError as e:
            raise SystemExit(str(e)) from None
        budget = (args.max_frames or runtime.card.loops.ar_decode.max_frames) * runtime.codec.cfg.hop / runtime.codec.sample_rate
        progress = Progress(budget, enabled=not args.quiet)
        channels, rate = runtime.codec.cfg.channels, runtime.codec.sample_rate
        with sf.SoundFile(out, "w", samplerate=rate, channels=channels, subtype="PCM_16") if args.stream else _Nothing() as wav:
            for chunk in handle:
                progress.update(chunk)
                if wav is not None:
                    wav.write(np.clip(chunk.audio, -1, 1).T)
        progress.close()
        result = handle.result()
        if not args.stream:
            sf.write(out, np.clip(result.audio, -1, 1).T, rate, subtype="PCM_16")
        if args.codes_out:
            np.save(args.codes_out, result.codes)
        m = result.metrics
        print(json.dumps({"card": runtime.card.name, "out": str(out), "finish_reason": result.finish_reason,
                          "frames": m.frames, "audio_seconds": round(m.audio_seconds, 3), "channels": channels,
                          "sample_rate": rate, "prompt_rows": m.prompt_rows,
                          "ttfa_s": None if m.ttfa_s is None else round(m.ttfa_s, 4), "total_s": round(m.total_s, 3),
                          "rtf": None if m.rtf is None else round(m.rtf, 4)}))
        return 0 if result.finish_reason in ("stop", "length") else 1
    finally:
        runtime.close()


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m v2", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    synth = sub.add_parser("synth", help="speak one text into a wav file")
    _runtime_arguments(synth)
    synth.add_argument("text", nargs="?", default=DEFAULT_TEXT)
    synth.add_argument("-o", "--out", default="out/speech.wav", help="the wav to write (16-bit PCM)")
    synth.add_argument("--reference", action="append", default=[], metavar="AUDIO",
                       help="a recording of the voice to clone (wav, flac, ogg, mp3); repeat for several")
    synth.add_argument("--reference-text", default=None,
                       help="the reference's transcript: the speech continues that recording")
    synth.add_argument("--voice", default=None, help="a stored voice (python -m v2 voices list)")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--stream", action="store_true", help="write the wav chunk by chunk as audio arrives")
    synth.add_argument("--max-frames", type=int, default=0, help="0: the card's limit (12.5 frames per second)")
    synth.add_argument("--min-frames", type=int, default=0, help="ignore the stop decision before this many frames")
    synth.add_argument("--language", default=None)
    synth.add_argument("--instruction", default=None)
    synth.add_argument("--codes-out", default=None, help="also write the codes [F, 12] as .npy")
    synth.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    voices = sub.add_parser("voices", help="store, list and remove voices (encoded once, kept on disk)")
    _runtime_arguments(voices)
    actions = voices.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="encode a recording (or load codes) and store it under a name")
    add.add_argument("name")
    add.add_argument("audio", help="a recording of the voice")
    add.add_argument("--text", default=None, help="its transcript (the voice then speaks by continuation)")
    actions.add_parser("list", help="one JSON line per stored voice")
    remove = actions.add_parser("remove", help="delete a stored voice")
    remove.add_argument("name")
    serve = sub.add_parser("serve", help="serve the runtime over HTTP (OpenAI-compatible; needs the server extra)")
    add_serve_arguments(serve)
    args = parser.parse_args(argv)
    if args.command == "serve":
        from v2.server.serve import run  # the server extra, imported only when serving

        return run(args)
    return _voices(args) if args.command == "voices" else _synth(args)


def _runtime_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--card", default=DEFAULT_CARD, help="card name in cards/ or a path to a card file")
    parser.add_argument("--checkpoint", default=None, help="model checkpoint directory (overrides the card's)")
    parser.add_argument("--codec-checkpoint", default=None, help="codec checkpoint directory (overrides the card's)")
    parser.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    parser.add_argument("--voices-dir", default=None, help="the voice store (default: the card's, else ~/.cache/v2)")


if __name__ == "__main__":
    sys.exit(main())
