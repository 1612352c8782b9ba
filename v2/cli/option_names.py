"""What the command line says back, in its options' names: a refused request's message with its fields named as
the options that set them (`in_option_names`, by `OPTION_FOR_FIELD`); an argument no parser knows, with the
closest option of the command it was given to (`chosen_parser`, `unrecognized`); an invalid choice (a command,
an action, a format) with the closest one (`choice_hint`).
Must not know: the runtime, models, the server, how the options are defined (v2/cli/options.py).
"""

from __future__ import annotations

import argparse
import ast
import re

from v2.errors import did_you_mean

# the request's fields -> the options that set them; a longer dotted name wins (`sampling.audio.top_k`)
OPTION_FOR_FIELD: dict[str, str] = {
    "seed": "--seed", "duration_frames": "--duration", "max_frames": "--max-frames", "min_frames": "--min-frames",
    "language": "--language", "instruction": "--instruction", "voice": "--voice", "reference_audio": "--reference",
    "reference_text": "--reference-text", "speaker": "--speaker", "text_feed": "--text-feed",
    **{f"{prefix}{knob}": f"--{knob.replace('_', '-')}" for prefix in ("sampling.audio.", "sampling.", "")
       for knob in ("temperature", "top_k", "top_p")},
    "sampling.repetition_penalty": "--repetition-penalty", "repetition_penalty": "--repetition-penalty",
}
_NAME = re.compile(r"(?<![\w.'-])([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)(?:\[(\d+)\])?(?![\w-])")


def in_option_names(message: str, text_option: str = "text") -> str:
    """A request's refusal as the command line says it: each request field named by the option that sets it
    (`max_frames: ...` -> `--max-frames: ...`, `reference_audio[1]` -> `--reference #2`, `text` -> the text's
    source). A plain word is taken for a field only where a message starts with it (`voice: ...`); a name
    with `_` or `.` anywhere, unless it is a card's setting ("the card's max_frames"). A whole-request rule
    loses its `request: ` prefix."""
    names = {**OPTION_FOR_FIELD, "text": text_option}

    def rename(part: str) -> str:
        def option(match: re.Match[str]) -> str:
            field, index = match.group(1), match.group(2)
            name = names.get(field)
            leading = match.start() == 0
            card_setting = part[:match.start()].endswith("card's ")
            if name is None or not (leading or "_" in field or "." in field) or card_setting:
                return match.group(0)
            return name if index is None else f"{name} #{int(index) + 1}"
        return _NAME.sub(option, part)

    return "; ".join(rename(part.removeprefix("request: ")) for part in message.split("; "))


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command's parser that `args` went to: `v2 voices remove ...` -> the parser of `remove`."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = None if sub is None else getattr(args, sub.dest, None)
        if sub is None or name not in sub.choices:
            return parser
        parser = sub.choices[name]


def unrecognized(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """argparse's refusal of arguments no option takes, with the closest option of `parser` for each
    mistyped one (`--temprature` -> `--temperature`)."""
    known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    hints = [did_you_mean(e.split("=", 1)[0], known) for e in extras if e.startswith("--")]
    return "; ".join([f"unrecognized arguments: {' '.join(extras)}", *(h.replace("'", "") for h in hints if h)])


_INVALID_CHOICE = re.compile(r"invalid choice: (?P<given>'.*') \(choose from (?P<choices>.*)\)$")


def choice_hint(message: str) -> str:
    """argparse's `invalid choice: 'synht' (choose from 'synth', ...)` with `; did you mean synth?` where one
    choice is close; any other message as it is."""
    m = _INVALID_CHOICE.search(message)
    if m is None:
        return message
    try:
        given = ast.literal_eval(m["given"])
        choices = [str(c) for c in ast.literal_eval(f"[{m['choices']}]")]
    except (ValueError, SyntaxError):
        return message
    hint = did_you_mean(str(given), choices)
    return f"{message}; {hint.replace(chr(39), '')}" if hint else message
