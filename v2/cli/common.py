"""What the commands that run a model share: checking the device, loading the runtime, the request the options
make, what the card and the checkpoint's config refuse of it, reading a file, and which failures are the
user's to act on.

Owns: `check_device` (refused before anything loads), `load_runtime` (the only place a model loads: one runtime
per job), `request` (the request's fields as the options set them), `precheck` (the family's `precheck`, its
refusal in the options' names, each command's way), `read_bounded` (a file or stdin, bounded), `read_utf8` (the
same, UTF-8), `expected` (a failure shown as one line rather than a bug shown with its traceback).
Must not know: model internals, scheduling, the server's internals, which command calls it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Callable

from v2.audiofile import OutputError
from v2.card import CardError, ModelCard, family_of
from v2.checkpoints import CheckpointNotFound
from v2.cli.option_names import in_option_names
from v2.cli.options import sampling_fields
from v2.errors import CliError, OverloadedError, RequestError
from v2.progress import Progress
from v2.registry import family_options

if TYPE_CHECKING:
    from v2.runtime import Runtime


def check_device(device: str | None) -> str:
    """The device to run on: `device`, else cuda when present, else cpu; refused before anything loads."""
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise CliError(f"--device {device!r}: not a device (use cpu, cuda or cuda:N)") from None
    if parsed.type not in ("cpu", "cuda"):
        raise CliError(f"--device {device!r}: the runtime runs on cpu or cuda")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        raise CliError(f"--device {device}: CUDA is not available ({why}, torch {torch.__version__})")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise CliError(f"--device {device}: there are {torch.cuda.device_count()} CUDA devices")
    return device


def load_runtime(args: argparse.Namespace, card: ModelCard, device: str, progress: Progress | None = None) -> Runtime:
    """The card's runtime on `device`: the only place a model loads."""
    if progress is not None:
        progress.loading(card.name, device)
    from v2.runtime import Runtime

    return Runtime.from_card(card, checkpoint=args.checkpoint, codec_checkpoint=args.codec_checkpoint,
                             device=device, voices_dir=args.voices_dir, aligner=aligner_of(args, card))


def check_aligner(source: str) -> None:
    """`--aligner` names an aligner card, a card file, a directory or a hub id (read before any model loads)."""
    from v2.aligner.card import resolve_aligner

    try:
        resolve_aligner(source)
    except CardError as e:
        raise CliError(f"--aligner: {e}") from None


def aligner_of(args: argparse.Namespace, card: ModelCard) -> str | None:
    """The aligner `--timestamps` needs (`--aligner`, else the seeded one for a seeded card, else the
    release's); None without `--timestamps`."""
    if getattr(args, "timestamps", None) is None:
        return None
    if getattr(args, "aligner", None) is not None:
        return str(args.aligner)
    return "forced_aligner_tiny" if card.seeded and args.checkpoint is None else "forced_aligner_0_6b"


def precheck(card: ModelCard, request: dict[str, Any], checkpoint: str | None, text_option: str = "text", *,
             rename: Callable[[str], str] | None = None) -> None:
    """What the card and the checkpoint's config refuse of the request (e.g. a speaker or language the
    checkpoint does not have), named as the options; before any model loads. `rename`: how the command says a
    refusal's fields as its options (default: `in_option_names` with the text's option, `text_option`)."""
    try:
        family_of(card).precheck(card, request, checkpoint=checkpoint)
    except ValueError as e:
        if not expected(e):
            raise
        said = rename(str(e)) if rename is not None else in_option_names(str(e), text_option)
        raise CliError(said) from None


def request(args: argparse.Namespace, family: str, text: str) -> dict[str, Any]:
    """The request's fields as the options set them (the duration, which needs the runtime's frame rate,
    aside)."""
    fields: dict[str, Any] = {
        "text": text, "seed": args.seed, "min_frames": args.min_frames, "stream": True,
        "language": args.language, "instruction": args.instruction, **_voice_fields(args),
        **_family_fields(family, args)}
    if args.max_frames:
        fields["max_frames"] = args.max_frames
    if getattr(args, "timestamps", None) is not None:
        fields["timestamps"] = "word"
    return fields


def _voice_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if args.reference:
        fields["reference_audio"] = args.reference if len(args.reference) > 1 else args.reference[0]
    if args.reference_text is not None:
        fields["reference_text"] = args.reference_text
    if args.voice is not None:
        fields["voice"] = args.voice
    return fields


def _family_fields(family: str, args: argparse.Namespace) -> dict[str, Any]:
    """The sampling knobs (the runtime's nested `sampling`, which every family's request takes) and the
    fields the family's own options set; an option that only other families take is refused."""
    own = {o.flag: o for o in family_options().get(family, ())}
    fields = sampling_fields(args)
    for name, value in vars(args).items():
        if not name.startswith("family_") or value is None:
            continue
        flag = "--" + name.removeprefix("family_").replace("_", "-")
        if flag not in own:
            raise CliError(f"{flag}: the {family} family takes no {flag[2:].replace('-', ' ')}")
        fields[own[flag].field] = value
    return fields


def read_bounded(source: str, where: str, limit: int) -> bytes:
    """A file's bytes (`-`: stdin's), refused naming `where` when it cannot be read or is over `limit` bytes (no
    more is read)."""
    try:
        if source == "-":
            raw = sys.stdin.buffer.read(limit + 1)
        else:
            with open(source, "rb") as f:
                raw = f.read(limit + 1)
    except OSError as e:
        raise CliError(f"{where}: cannot be read ({e.strerror or e})") from None
    if len(raw) > limit:
        raise CliError(f"{where}: over {limit} bytes")
    return raw


def read_utf8(source: str, where: str, limit: int) -> str:
    """A file's text (`-`: stdin's), refused as `read_bounded` refuses, or naming `where` when it is not UTF-8; a
    byte-order mark is dropped."""
    raw = read_bounded(source, where, limit)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise CliError(f"{where}: not UTF-8 text (byte {e.start})") from None


def expected(error: BaseException) -> bool:
    """A failure the user can act on (shown as one line) rather than a bug (shown with its traceback)."""
    if isinstance(error, (CliError, OutputError, CardError, CheckpointNotFound, RequestError, OverloadedError)):
        return True
    voices = sys.modules.get("v2.voices.store")  # loads torch; an error of its means it is loaded already
    return voices is not None and isinstance(error, voices.VoiceError)
