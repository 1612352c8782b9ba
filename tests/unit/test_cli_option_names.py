"""`v2 synth` speaks in its own option names: every option's bad value, whether argparse or the runtime refuses
it, is one `error: ...` line that names the option (`--max-frames`, `--reference #2`), never the request's
field (`max_frames`, `sampling.audio.top_k`). Also the renaming rule itself, on every field it knows."""

from __future__ import annotations

import argparse
import re

import numpy as np
import pytest
import soundfile as sf

from v2.cli import build_parser, main
from v2.cli.options import OPTION_FOR_FIELD, in_option_names

LONG = "x" * 20_001  # over the card's max_text_chars
# each synth option with a value that is refused (argparse's check, the request's, or the card's), and what
# the error line must say; flags take no value
CASES: dict[str, tuple[list[str], str]] = {
    "text": (["   "], "error: TEXT: must not be empty or whitespace"),
    "--text-file": (["--text-file", "{tmp}/none.txt"], "error: --text-file {tmp}/none.txt: cannot be read"),
    "--out": (["-o", "{tmp}"], "error: --out {tmp}: is a directory"),
    "--format": (["--format", "aiff"], "error: argument --format: invalid choice: 'aiff'"),
    "--reference": (["--reference", "{tmp}/noise.wav", "--reference", "{tmp}/none.wav"],
                    "error: --reference #2: no such file"),
    "--reference-text": (["--reference-text", "Hello."], "error: --reference-text: continuation needs"),
    "--voice": (["--voice", "nobody"], "error: --voice: no stored voice named 'nobody' in {tmp}/v (none stored"),
    "--seed": (["--seed", "-1"], "error: argument --seed: must lie in [0, "),
    "--temperature": (["--temperature", "0.1"], "error: argument --temperature: must be 0 (greedy) or lie in"),
    "--top-k": (["--top-k", "2.5"], "error: argument --top-k: expected a whole number, got '2.5'"),
    "--top-p": (["--top-p", "1.5"], "error: argument --top-p: must lie in (0, 1], got 1.5"),
    "--repetition-penalty": (["--repetition-penalty", "0.5"], "error: argument --repetition-penalty: must lie in"),
    "--duration": (["--duration", "100000"], "error: --duration: 1250000 exceeds the card's max_frames (600)"),
    "--max-frames": (["--max-frames", "100000"], "error: --max-frames: 100000 exceeds the card's cap"),
    "--min-frames": (["--min-frames", "100000"], "error: --min-frames: 100000 exceeds --max-frames"),
    "--language": (["--language", LONG], "error: --language: 20001 characters, over the card's max_text_chars"),
    "--instruction": (["--instruction", LONG], "error: --instruction: 20001 characters, over the card's"),
    "--speaker": (["--speaker", "vivian"], "error: --speaker: the moss_tts_local family takes no speaker"),
    "--text-feed": (["--text-feed", "sometimes"], "error: argument --text-feed: invalid choice: 'sometimes'"),
    "--codes-out": (["--codes-out", "{tmp}"], "error: --codes-out {tmp}: is a directory"),
    "--card": (["--card", "nope"], "error: card 'nope' not found"),
    "--checkpoint": (["--checkpoint", "{tmp}/missing"], "error: checkpoint directory not found: {tmp}/missing"),
    "--codec-checkpoint": (["--codec-checkpoint", "{tmp}/gone"], "error: checkpoint directory not found: {tmp}/gone"),
    "--device": (["--device", "meta"], "error: --device 'meta': the runtime runs on cpu or cuda"),
    "--batch": (["--batch", "{tmp}/none.jsonl", "-o", "{tmp}"], "error: --batch {tmp}/none.jsonl: cannot be read"),
    "--timestamps": (["--timestamps", "{tmp}"], "error: --timestamps {tmp}: is a directory"),
    "--aligner": (["--timestamps", "--aligner", "nope"], "error: --aligner: aligner: 'nope' is no aligner card"),
}
# options whose every value is usable: a voice store folder is made when first written
NO_BAD_VALUE = {"--voices-dir"}
FIELD_NAMES = re.compile(r"sampling\.|\b(max|min|duration)_frames\b(?<!card's max_frames)|reference_(audio|text)\b|"
                         r"\btop_[kp]\b|repetition_penalty|\brequest: ")


def test_every_synth_option_has_a_case():
    synth = build_parser()._subparsers._group_actions[0].choices["synth"]  # type: ignore[union-attr]
    options = {max(a.option_strings, key=len) if a.option_strings else a.dest for a in synth._actions
               if not isinstance(a, (argparse._HelpAction, argparse._StoreTrueAction))
               and a.default is not argparse.SUPPRESS}
    assert options == set(CASES) | NO_BAD_VALUE


@pytest.mark.parametrize("option", sorted(CASES))
def test_a_bad_value_names_the_option(option, tmp_path, capsys):
    sf.write(tmp_path / "noise.wav", 0.1 * np.sin(np.arange(48000) / 10.0), 48000)
    args, expected = CASES[option]
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    text = [] if option in ("text", "--text-file", "--batch") else ["Hi."]
    out = [] if option == "--out" else ["-o", str(tmp_path / "x.wav")]
    try:
        rc = main(["synth", *(argv if option == "text" else text), *out, "-q", "--voices-dir", str(tmp_path / "v"),
                   *([] if option == "text" else argv)])
    except SystemExit as e:  # argparse's usage errors
        rc = e.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc in (1, 2) and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(expected.replace("{tmp}", str(tmp_path))), lines[0]
    assert not FIELD_NAMES.search(lines[0].replace("card's max_frames", "")), lines[0]
    assert not (tmp_path / "x.wav").exists()


@pytest.mark.parametrize("field", sorted(OPTION_FOR_FIELD))
def test_every_known_field_is_renamed_where_a_message_starts_with_it(field):
    option = OPTION_FOR_FIELD[field]
    assert in_option_names(f"{field}: must lie in [0, 1]") == f"{option}: must lie in [0, 1]"
    assert in_option_names(f"seed: bad; {field}: bad") == f"--seed: bad; {option}: bad"


def test_names_inside_a_message_are_renamed_but_not_the_cards_settings_or_plain_words():
    assert (in_option_names("request: min_frames (11) exceeds max_frames (10)")
            == "--min-frames (11) exceeds --max-frames (10)")
    assert (in_option_names("max_frames: 100000 exceeds the card's max_frames (600)")
            == "--max-frames: 100000 exceeds the card's max_frames (600)")
    assert (in_option_names("reference_text: needs one reference (audio, codes or voice)")
            == "--reference-text: needs one reference (audio, codes or voice)")
    assert in_option_names("reference_audio[2]: too short") == "--reference #3: too short"
    assert in_option_names("text: too long", "--text-file") == "--text-file: too long"
    assert in_option_names("prompt_rows: not ours") == "prompt_rows: not ours"  # no option sets it: kept
