"""A command that needs no model loads none: `voices list` and `voices remove` read the store alone (its checks
from the family's `voice_spec`, read from the card and the checkpoint's config), and what the card or the
config decides is refused before any model loads (a taken name for `voices add`, an unknown qwen3_tts
`--speaker` or `--language`). The voices options go before or after the action. The help reads the same on
every command that shares an option, and is true for both families."""

from __future__ import annotations

import re

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from v2.card import DEFAULT_CHAT_CARD, family_of, load_card
from v2.cli import build_parser, main
from v2.cli.commands import _Help
from v2.cli.options import RUNTIME_OPTIONS
from v2.runtime.runtime import Runtime
from v2.voices.store import VoiceStore

from no_model import ModelLoaded, no_model  # noqa: F401 (a fixture)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHECKPOINTS = {"moss_tts_local_tiny": FIXTURES / "moss_tts_local_tiny" / "checkpoint",
               "qwen3_tts_tiny": FIXTURES / "qwen3_tts_tiny" / "checkpoint"}


# what each tiny card's voices carry: codes per frame, their range, the named arrays (voice_spec is tested below)
SPECS: dict[str, tuple[int, int, dict[str, tuple[int, ...]]]] = {
    "moss_tts_local_tiny": (12, 1024, {}), "qwen3_tts_tiny": (16, 2048, {"x_vector": (64,)})}


def stored_alice(card_name: str, directory: Path) -> None:
    """A voice `alice` stored from codes (and the arrays the card's voices carry), no model involved."""
    width, codebook_size, named = SPECS[card_name]
    store = VoiceStore(directory, encode=lambda audio: None, width=width, codebook_size=codebook_size, arrays=named)
    arrays = {name: np.full(shape, 0.5, np.float32) for name, shape in named.items()}
    store.add("alice", np.ones((7, width), np.int64), text="Hello there.", arrays=arrays)


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("card", ["moss_tts_local_tiny", "qwen3_tts_tiny"])
def test_voices_list_and_remove_load_no_model(tmp_path, capsys, no_model, card):
    store = ["--card", card, "--voices-dir", str(tmp_path)]
    stored_alice(card, tmp_path)
    assert main(["voices", *store, "list", "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    arrays = {"arrays": ["x_vector"]} if card == "qwen3_tts_tiny" else {}
    assert listed == [{"name": "alice", "frames": 7, "text": "Hello there.", "created": listed[0]["created"], **arrays}]
    assert main(["voices", *store, "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "FRAMES", "ADDED", "TEXT"] and table[1].split()[:2] == ["alice", "7"]
    capsys.readouterr()
    assert main(["voices", *store, "remove", "alice"]) == 0
    removed = f"removed the voice 'alice' (7 frames, text 'Hello there.') from {tmp_path}"
    assert capsys.readouterr().out.strip() == removed
    assert main(["voices", *store, "remove", "alice"]) == 1
    assert error_line(capsys) == (f"error: voices remove: no stored voice named 'alice' in {tmp_path} "
                                  "(none stored; see v2 voices list)")
    assert main(["voices", *store, "list"]) == 0
    assert capsys.readouterr().out.strip() == f"no stored voices in {tmp_path}"


def test_a_taken_name_is_refused_before_any_model_loads(tmp_path, capsys, no_model):
    stored_alice("moss_tts_local_tiny", tmp_path)
    recording = tmp_path / "speaker.wav"
    recording.write_bytes(b"not read: the name is refused first")
    store = ["--voices-dir", str(tmp_path)]
    assert main(["voices", *store, "add", "alice", str(recording)]) == 1
    assert error_line(capsys) == (f"error: voices add: a voice named 'alice' is stored already in {tmp_path}; "
                                  "pass --replace to replace it")
    with pytest.raises(ModelLoaded):  # a free name, or --replace: the recording is encoded by a model
        main(["voices", *store, "add", "alice", str(recording), "--replace"])
    with pytest.raises(ModelLoaded):
        main(["voices", *store, "add", "bob", str(recording)])


@pytest.mark.parametrize("args,message", [
    (["--speaker", "nobody"], "error: --speaker: 'nobody' is not a speaker of this checkpoint (aiden, dylan, "),
    (["--speaker", "Vivian", "--language", "xx"], "error: --language: 'xx' is not a language of this checkpoint; "
                                                   "give one of Auto, Beijing_dialect, Chinese (zh), English (en), "),
])
def test_qwen3_speaker_and_language_are_refused_before_any_model_loads(tmp_path, capsys, no_model, args, message):
    out = tmp_path / "x.wav"
    assert main(["synth", "Hello.", "--card", "qwen3_tts_tiny", "-o", str(out), "-q", *args]) == 1
    assert error_line(capsys).startswith(message)
    with pytest.raises(ModelLoaded):  # known names (any case, or an ISO 639-1 code) pass on to the model
        main(["synth", "Hello.", "--card", "qwen3_tts_tiny", "-o", str(out), "-q", "--speaker", "VIVIAN",
              "--language", "en"])


@pytest.mark.parametrize("argv", [
    ["voices", "list", "--card", "qwen3_tts_tiny"],
    ["voices", "--card", "qwen3_tts_tiny", "list"],
    ["voices", "--card", "moss_tts_local_tiny", "list", "--card", "qwen3_tts_tiny"],  # the later one wins
])
def test_the_voices_options_go_before_or_after_the_action(tmp_path, capsys, monkeypatch, no_model, argv):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == f"no stored voices in {tmp_path / 'v2' / 'voices' / 'qwen3_tts_tiny'}"
    args = build_parser().parse_args([*argv, "--voices-dir", str(tmp_path / "v"), "--device", "cpu"])
    assert (args.card, args.voices_dir, args.device, args.checkpoint) == ("qwen3_tts_tiny", str(tmp_path / "v"),
                                                                         "cpu", None)


@pytest.mark.parametrize("card", ["moss_tts_local_tiny", "qwen3_tts_tiny"])
def test_voice_spec_is_what_the_bound_family_checks(card):
    loaded = load_card(card)
    spec = family_of(loaded).voice_spec(loaded)
    assert family_of(loaded).voice_spec(loaded, checkpoint=str(CHECKPOINTS[card])) == spec  # from its config.json
    runtime = Runtime.from_card(loaded, device="cpu", graphs=False)
    try:
        family = runtime.family
        assert spec == (family.code_width, family.codebook_size, getattr(family, "voice_arrays", {})) == SPECS[card]
    finally:
        runtime.close()


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(found.choices)


def rendered(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's help as --help shows it (defaults filled in), by its longest name."""
    formatter = _Help("v2")
    return {max(a.option_strings, key=len): " ".join(formatter._expand_help(a).split())
            for a in parser._actions if a.option_strings}


def test_shared_options_read_the_same_on_every_command():
    commands = subparsers(build_parser())
    parsers = {name: rendered(p) for name, p in commands.items()}
    parsers |= {f"voices {name}": rendered(p) for name, p in subparsers(commands["voices"]).items()}
    assert set(RUNTIME_OPTIONS) - {"--voices-dir"} <= set(parsers["serve"])  # the server takes no voices folder
    assert parsers["chat"].pop("--card").endswith(f"(default: {DEFAULT_CHAT_CARD})")  # chat's default is a chat card
    for option in RUNTIME_OPTIONS:
        texts = {name: helps[option] for name, helps in parsers.items() if option in helps}
        assert len(set(texts.values())) == 1, texts
    for option in set(parsers["synth"]) & set(parsers["serve"]):
        assert parsers["synth"][option] == parsers["serve"][option], option


def test_every_serve_option_has_help():
    serve = rendered(subparsers(build_parser())["serve"])
    for option, text in serve.items():
        assert text and not text.startswith("(default:"), option  # not the default alone
    assert "uvicorn" in serve["--log-level"] and "(default: info)" in serve["--log-level"]
    assert "access log" in serve["--no-access-log"]


def test_synth_help_is_true_for_both_families():
    """Worded for any card, naming no family in the CLI's own text; a family's own options come from its
    package and say whose they are."""
    synth = rendered(subparsers(build_parser())["synth"])
    assert "the card's sample rate and channels" in synth["--out"]
    assert "G codes per frame" in synth["--codes-out"]
    assert "ISO 639-1 code" in synth["--language"] and "into the prompt as written" in synth["--language"]
    assert "where its family takes a duration target" in synth["--duration"]
    speaker = synth["--speaker"]  # two families take it: each says what it means for them
    assert "qwen3_tts: a speaker of the checkpoint, e.g. vivian" in speaker and "csm: the speaker id" in speaker
    assert synth["--text-feed"].endswith("(the qwen3_tts family's)")
    root = Path(__file__).resolve().parents[2] / "v2" / "cli"
    files = sorted(root.glob("*.py"))
    assert {"commands.py", "options.py", "common.py"} <= {f.name for f in files}
    for f in files:
        assert not re.search(r"moss_tts_local|qwen3_tts|MOSS|Qwen", f.read_text()), f.name

