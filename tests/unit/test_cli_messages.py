"""What the command line says when a user mistypes or asks for something absent: an unknown option is refused
by the (sub)command it was given to, with its closest option and that command's help page (a mistyped
command, action or format: the closest choice); the argument is
named as --help names it (`TEXT`); an unknown `--voice` lists the stored voices and the store's folder before
any model loads; `voices remove` says what it removed, and an unknown name as `--voice` does; a mistyped
`--batch` key gets its closest option; files and errors of a batch share one numbering (line numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from v2.cli import build_parser, main
from v2.cli.batch import _read
from v2.voices.store import VoiceStore

from no_model import ModelLoaded, no_model  # noqa: F401 (a fixture)


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("argv, expected", [
    (["synth", "Hi.", "--temprature", "1"],
     "error: unrecognized arguments: --temprature 1; did you mean --temperature? (see: v2 synth --help)"),
    (["synth", "Hi.", "--top-kk=3"],
     "error: unrecognized arguments: --top-kk=3; did you mean --top-k? (see: v2 synth --help)"),
    (["voices", "list", "--jsn"],
     "error: unrecognized arguments: --jsn; did you mean --json? (see: v2 voices list --help)"),
    (["voices", "add", "a", "x.wav", "--replase"],
     "error: unrecognized arguments: --replase; did you mean --replace? (see: v2 voices add --help)"),
    (["voices", "remove", "a", "--voices-dri", "d"],
     "error: unrecognized arguments: --voices-dri d; did you mean --voices-dir? (see: v2 voices remove --help)"),
    (["serve", "--prot", "9"], "error: unrecognized arguments: --prot 9; did you mean --port? (see: v2 serve --help)"),
    (["cards", "--debg"], "error: unrecognized arguments: --debg; did you mean --debug? (see: v2 cards --help)"),
    (["synth", "Hi.", "--zzzz"], "error: unrecognized arguments: --zzzz (see: v2 synth --help)"),
])
def test_a_mistyped_option_gets_the_closest_one_and_its_commands_help(argv, expected, capsys, no_model):
    assert usage_error(argv, capsys) == expected


@pytest.mark.parametrize("argv, expected", [
    (["synht"], "error: argument COMMAND: invalid choice: 'synht' (choose from 'synth', 'voices', 'chat', 'cards', "
                "'serve'); did you mean synth? (see: v2 --help)"),
    (["voices", "rmove", "x"], "error: argument action: invalid choice: 'rmove' (choose from 'add', 'list', "
                               "'remove'); did you mean remove? (see: v2 voices --help)"),
    (["synth", "--format", "opsu"], "error: argument --format: invalid choice: 'opsu' (choose from 'wav', 'flac', "
                                    "'ogg', 'mp3', 'opus', 'aac'); did you mean opus? (see: v2 synth --help)"),
    (["synth", "--format", "zzz"], "error: argument --format: invalid choice: 'zzz' (choose from 'wav', 'flac', "
                                   "'ogg', 'mp3', 'opus', 'aac') (see: v2 synth --help)"),
])
def test_a_mistyped_choice_gets_the_closest_one(argv, expected, capsys, no_model):
    assert usage_error(argv, capsys) == expected


def test_the_text_argument_is_named_as_help_names_it(tmp_path, capsys):
    assert main(["synth", "   ", "-o", str(tmp_path / "x.wav"), "-q"]) == 1
    assert capsys.readouterr().err.strip() == "error: TEXT: must not be empty or whitespace"


def _store(directory: Path, *names: str) -> None:
    store = VoiceStore(directory, encode=lambda audio: None, width=12, codebook_size=1024)
    for name in names:
        store.add(name, np.ones((3, 12), np.int64), text=None)


def test_an_unknown_voice_lists_the_stored_ones_and_the_folder_before_any_model_loads(tmp_path, capsys, no_model):
    voices = tmp_path / "voices"
    _store(voices, "alice", "carol")
    argv = ["synth", "Hi.", "-o", str(tmp_path / "x.wav"), "-q", "--voices-dir", str(voices)]
    assert main([*argv, "--voice", "bob"]) == 1
    assert capsys.readouterr().err.strip() == (f"error: --voice: no stored voice named 'bob' in {voices} "
                                               "(stored: alice, carol; see v2 voices list)")
    assert main([*argv, "--voice", "../alice"]) == 1
    assert capsys.readouterr().err.strip().startswith("error: --voice: name must be 1-64 characters")
    with pytest.raises(ModelLoaded):  # a stored one goes on to load the model
        main([*argv, "--voice", "alice"])


def test_voices_remove_says_what_it_removed_and_names_itself_when_there_is_none(tmp_path, capsys, no_model):
    _store(tmp_path, "alice", "carol")
    store = ["voices", "--voices-dir", str(tmp_path), "remove"]
    assert main([*store, "alice"]) == 0
    assert capsys.readouterr().out.strip() == f"removed the voice 'alice' (3 frames) from {tmp_path}"
    assert main([*store, "alice"]) == 1
    assert capsys.readouterr().err.strip() == (f"error: voices remove: no stored voice named 'alice' in {tmp_path} "
                                               "(stored: carol; see v2 voices list)")
    assert main(["voices", "--voices-dir", str(tmp_path / "none"), "remove", "x"]) == 1
    assert "(none stored; see v2 voices list)" in capsys.readouterr().err
    assert main([*store, "a/b"]) == 1
    assert capsys.readouterr().err.startswith("error: voices remove: name must be 1-64 characters")


def test_a_mistyped_batch_key_gets_the_closest_option(tmp_path, capsys, no_model):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"text": "x", "temprature": 1}) + "\n\n" + json.dumps({"txt": "y"}) + "\n")
    args = build_parser().parse_args(["synth", "--batch", str(items), "-o", str(tmp_path)])
    got, _ = _read(str(items), args)
    assert [(i.line, i.name, i.error) for i in got] == [
        (1, "001", "temprature: not an option an item sets (text, voice, seed, max_frames, temperature, ...; "
                   "did you mean 'temperature'? see: v2 synth --help)"),
        (3, "003", "txt: not an option an item sets (text, voice, seed, max_frames, temperature, ...; "
                   "did you mean 'text'? see: v2 synth --help)")]
