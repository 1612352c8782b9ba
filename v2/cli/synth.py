"""`v2 synth "text" -o out.wav`: one text through the runtime into an audio file (`--batch`: v2/cli/batch.py).

Owns: the text (the argument, a file or stdin), the output path (the caller's directory for a relative one) and
the checks before any model loads (v2/cli/common.py: the device, the card's and the checkpoint's refusals; an
unknown stored voice: v2/cli/voices.py), the progress line on stderr, writing the audio file (with `--stream`
as it is made), the summary as one JSON line on stdout, and Ctrl-C: the audio made so far kept as a whole file,
said in one line, exit 130.
Must not know: model internals, scheduling, the server.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from v2.audiofile import check_writable, format_for
from v2.card import load_card
from v2.cli.common import check_aligner, check_device, expected, load_runtime, precheck, read_utf8, request
from v2.cli.option_names import in_option_names
from v2.cli.options import DEFAULT_OUT, DEFAULT_TEXT
from v2.errors import CliError
from v2.progress import Progress

MAX_TEXT_FILE_BYTES = 1 << 20  # a text file or stdin is read up to this much (a card takes 20 000 characters)


def _text(args: argparse.Namespace) -> tuple[str, str]:
    """What to say, and the option that gave it (for errors): the argument (`TEXT`, as --help names it), stdin
    (`-`) or `--text-file`."""
    if args.text_file is not None and args.text is not None:
        raise CliError("--text-file: give the text or --text-file, not both")
    source = args.text_file if args.text_file is not None else args.text
    if source is None:
        return DEFAULT_TEXT, "TEXT"
    option = "--text-file" if args.text_file is not None else "TEXT"
    if source != "-" and option == "TEXT":
        return source, option
    where = "stdin (-)" if source == "-" else f"{option} {source}"
    text = read_utf8(source, where, MAX_TEXT_FILE_BYTES)
    if not text.strip():
        raise CliError(f"{where}: no text in it")
    return text.strip(), option


def run_synth(args: argparse.Namespace) -> int:
    """`v2 synth`: one text into one file, or `--batch`'s items into a folder."""
    if args.batch is not None:
        from v2.cli.batch import run_batch

        return run_batch(args)
    from v2.audiofile import AudioWriter, write_audio

    # relative to the caller's directory (as typed in errors; reported absolute); a folder the user named is
    # created only with --mkdir, the default's own folder always
    out = check_writable(args.out, "--out", make_parents=args.mkdir or args.out == DEFAULT_OUT)
    fmt = format_for(out, args.format)
    if args.codes_out:
        check_writable(args.codes_out, "--codes-out", make_parents=args.mkdir)
    if args.timestamps not in (None, "-"):
        check_writable(args.timestamps, "--timestamps", make_parents=args.mkdir)
    if args.aligner is not None:  # an unknown aligner is refused before any model loads
        check_aligner(args.aligner)
    text, text_option = _text(args)
    card = load_card(args.card)  # a bad card is refused before the device is looked at
    device = check_device(args.device)
    fields = request(args, card.family, text)
    precheck(card, fields, args.checkpoint, text_option)
    if args.voice is not None:  # an unknown stored voice is refused before the model loads
        from v2.cli.voices import check_voice

        check_voice(args, card)
    with Progress(enabled=not args.quiet) as progress:
        runtime = load_runtime(args, card, device, progress)
        try:
            if args.duration is not None:  # the family refuses a target over its cap, named as --duration
                if "duration_frames" not in runtime.request_fields:
                    raise CliError(f"--duration: the {runtime.card.family} family takes no duration target")
                fields["duration_frames"] = max(1, round(args.duration * runtime.frame_rate))
            try:
                handle = runtime.submit(fields)
            except ValueError as e:  # a RequestError or a VoiceError: named as the options that set the fields
                if not expected(e):
                    raise
                raise CliError(in_option_names(str(e), text_option)) from None
            progress.started()
            channels, rate = runtime.channels, runtime.sample_rate
            writer = AudioWriter(out, fmt, rate, channels) if args.stream else None
            made: list[Any] = []  # the chunks' audio so far (the handle holds them too): kept on Ctrl-C
            ctrl_c = _CtrlC(handle)
            try:
                for chunk in handle:
                    progress.update(chunk.frames, chunk.audio.shape[1] / chunk.sample_rate, handle.segments)
                    if writer is not None:
                        writer.write(chunk.audio)
                    made.append(chunk.audio)
                result = handle.result()
            finally:
                ctrl_c.restore()
                if writer is not None:
                    writer.close()
            if ctrl_c.hit:
                progress.clear()
                return _interrupted(out, fmt, rate, made, writer is not None)
            m = result.metrics
            noise = ("the card's weights are seeded: this is noise, not speech, at up to full scale (turn the volume "
                     "down)") if card.seeded and args.checkpoint is None else None
            progress.done(m.frames, m.audio_seconds, result.finish_reason, note=noise)
            if result.finish_reason not in ("stop", "length"):
                raise CliError(f"synthesis ended with {result.finish_reason}: {result.error or 'no audio'}")
            if not args.stream:
                write_audio(out, fmt, result.audio, rate)
            if args.codes_out:
                import numpy as np

                np.save(args.codes_out, result.codes)
            words = [{"word": w.word, "start": w.start, "end": w.end} for w in result.words]
            if args.timestamps not in (None, "-"):
                Path(args.timestamps).write_text(json.dumps(words, ensure_ascii=False) + "\n")
        finally:
            runtime.close()
    print(json.dumps({"card": runtime.card.name, "out": str(out.absolute()), "format": fmt,
                      "finish_reason": result.finish_reason, "frames": m.frames, "audio_seconds": round(m.audio_seconds, 3), "channels": channels,
                      "sample_rate": rate, "prompt_rows": m.prompt_rows,
                      "ttfa_s": None if m.ttfa_s is None else round(m.ttfa_s, 4), "total_s": round(m.total_s, 3),
                      "rtf": None if m.rtf is None else round(m.rtf, 4),
                      **({"words": words} if args.timestamps is not None else {})}, ensure_ascii=False))
    return 0


class _CtrlC:
    """While a request runs, the first Ctrl-C cancels it instead of raising: the chunks made until the engine
    aborts it still arrive, then the handle ends, so every chunk read is whole in the file (a KeyboardInterrupt
    could land inside a write). A second Ctrl-C raises KeyboardInterrupt as usual. Only where Python's own
    handler is installed (the main thread; not where SIGINT is ignored or an embedding program has its own)."""

    def __init__(self, handle: Any) -> None:
        self.handle, self.hit = handle, False
        mine = threading.current_thread() is threading.main_thread()
        self.installed = mine and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        if self.installed:
            signal.signal(signal.SIGINT, self._cancel)

    def _cancel(self, sig: int, frame: Any) -> None:
        self.hit = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.handle.cancel()  # posts to the engine; this thread holds none of the runtime's locks here

    def restore(self) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted(out: Path, fmt: str, rate: int, made: list[Any], streamed: bool) -> int:
    """Ctrl-C while the audio is made: the audio so far is kept as a whole file (with --stream it is in the
    file already, closed), said in one line; the exit status is a Ctrl-C'd program's."""
    from v2.audiofile import write_audio

    samples = sum(int(a.shape[1]) for a in made)
    if samples and not streamed:
        import numpy as np

        write_audio(out, fmt, np.concatenate(made, axis=1), rate)
    if not streamed and not samples:
        print("interrupted: no audio was made yet; nothing written", file=sys.stderr)
    else:
        print(f"interrupted: wrote {samples / rate:.2f} s of audio to {out.absolute()}", file=sys.stderr)
    return 130
