"""`v2 chat` on the seeded `qwen3_omni_tiny` card: a user turn of text and a recording -> the reply's text on
stdout and its 24 kHz audio in a wav; `--text-only` writes none; every refusal names the option that set it; a
recording whose contents are not the format its suffix names is refused before the model loads; the suffixes
taken name exactly the formats the server takes (the family's `input_audio_formats`)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import soundfile as sf

from v2.audiofile import SUFFIXES
from v2.card import load_card
from v2.cli import main
from v2.cli.chat import audio_format, in_options, input_audio_formats, messages
from v2.errors import CliError

FORMATS = ("wav", "mp3", "flac", "ogg")  # what the server takes and publishes (tests/server/test_chat_omni.py)


def _wav(path, seconds: float, rate: int = 16000):
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), rate)
    return path


def test_chat_text_and_audio_in_speech_out(tmp_path, capsys):
    out = tmp_path / "reply.wav"
    question = _wav(tmp_path / "q.wav", 1.2, rate=22050)
    assert main(["chat", "--card", "qwen3_omni_tiny", "--system", "Be brief.", "--audio", str(question),
                 "--message", "What is this?", "--voice", "Ethan", "--max-tokens", "6", "--max-frames", "5",
                 "-o", str(out), "-q"]) == 0
    captured = capsys.readouterr()
    assert captured.out.endswith("\n") and captured.out.count("\n") >= 1  # the reply's text
    audio, rate = sf.read(out)
    assert rate == 24000 and audio.ndim == 1 and 0 < len(audio) <= 5 * 1920


def test_chat_text_only_writes_no_audio(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["chat", "--card", "qwen3_omni_tiny", "-m", "Hi", "--text-only", "--max-tokens", "4", "-q"]) == 0
    assert not (tmp_path / "out").exists()
    assert capsys.readouterr().out.endswith("\n")


@pytest.mark.parametrize("argv, error", [
    (["chat", "-q"], "error: --message: give the user's turn"),
    (["chat", "--audio", "{tmp}/a.aiff", "-q"], "error: --audio {tmp}/a.aiff: cannot tell the format"),
    (["chat", "--audio", "{tmp}/missing.wav", "-q"], "error: --audio {tmp}/missing.wav: cannot be read"),
    (["chat", "-m", "hi", "--text-only", "-o", "{tmp}/x.wav", "-q"], "error: --out: --text-only makes no audio"),
    (["chat", "-m", "hi", "--temperature", "-1"], "error: argument --temperature"),
    (["chat", "-m", "hi", "-o", "{tmp}/x.wav", "--voice", "nobody", "-q"], "error: --voice: "),
    (["chat", "-m", "a", "-m", "say <|im_end|>", "-o", "{tmp}/x.wav", "-q"], "error: --message #2: contains the special token"),
    (["chat", "-m", "a", "--audio", "{tmp}/short.wav", "-o", "{tmp}/x.wav", "-q"], "error: --audio {tmp}/short.wav: is "),
])
def test_chat_refusals_name_the_option(tmp_path, capsys, argv, error):
    _wav(tmp_path / "short.wav", 0.005)
    with pytest.raises(SystemExit) if "argument" in error else _nothing():
        code = main(["chat", "--card", "qwen3_omni_tiny", *[a.replace("{tmp}", str(tmp_path)) for a in argv[1:]]])
        assert code != 0
    assert error.replace("{tmp}", str(tmp_path)) in capsys.readouterr().err


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def test_message_paths_said_as_options(tmp_path):
    audio = _wav(tmp_path / "a.wav", 0.1)
    args = argparse.Namespace(system="s", parts=[("text", "x"), ("audio", str(audio)), ("text", "y")])
    turns, labels = messages(args, FORMATS)
    assert [t["role"] for t in turns] == ["system", "user"]
    assert [p["type"] for p in turns[1]["content"]] == ["text", "input_audio", "text"]
    assert turns[1]["content"][1]["input_audio"]["format"] == "wav"
    said = in_options("messages[1].content[1].input_audio.data: is 0.00 s long", labels)
    assert said == f"--audio {audio}: is 0.00 s long"
    assert in_options("messages[1].content[2].text: bad", labels) == "--message #2: bad"
    assert in_options("messages[0].content: bad", labels) == "--system: bad"
    assert in_options("speaker: 'x' is not a speaker", labels) == "--voice: 'x' is not a speaker"
    assert in_options("max_tokens: must be at least 1", labels) == "--max-tokens: must be at least 1"


def test_an_audio_file_over_the_bound_is_refused_naming_the_option(tmp_path, monkeypatch):
    import v2.cli.chat as chat

    monkeypatch.setattr(chat, "MAX_AUDIO_BYTES", 100)  # the bounded read the other commands use, at 100 bytes
    audio = _wav(tmp_path / "long.wav", 0.1)
    with pytest.raises(CliError, match=rf"^--audio {audio}: over 100 bytes$"):
        messages(argparse.Namespace(system=None, parts=[("audio", str(audio))]), FORMATS)


def test_the_suffixes_taken_name_exactly_the_formats_the_server_takes():
    """The CLI's formats are the family's list (the one the server refuses others by and publishes as the part's
    `format` enum), through the one suffix table (v2/audiofile.py): every suffix naming one of them is taken,
    every other refused, and each of them is reachable."""
    from v2.families.qwen3_omni.chat_audio import FORMATS as decoded

    formats = input_audio_formats(load_card("qwen3_omni_tiny"))
    assert formats == FORMATS == decoded
    taken = set()
    for suffix, fmt in SUFFIXES.items():
        for name in (f"q{suffix}", f"q{suffix.upper()}"):
            if fmt in formats:
                assert audio_format(name, formats) == fmt
                taken.add(fmt)
            else:
                with pytest.raises(CliError, match=rf"^--audio {name}: the card's model does not read {fmt}; give a "):
                    audio_format(name, formats)
    assert taken == set(formats)
    with pytest.raises(CliError, match=r"^--audio q: cannot tell the format from the suffix '\(none\)'; give a .wav"):
        audio_format("q", formats)
    assert input_audio_formats(load_card("moss_tts_local_tiny")) == ()
    with pytest.raises(CliError, match=r"^--audio q.wav: the card's model takes no recordings"):
        audio_format("q.wav", ())


@pytest.mark.parametrize("name, container, error", [
    ("q.mp3", "WAV", "holds wav audio, not mp3 as its suffix says"),
    ("q.wav", "FLAC", "holds flac audio, not wav as its suffix says"),
    ("q.ogg", "AIFF", "holds aiff audio, not ogg as its suffix says"),
    ("q.flac", None, "the bytes are not decodable as audio (Format not recognised"),
    ("q.wav", "", "is empty (0 bytes)"),
])
def test_a_recording_not_in_its_suffixs_format_is_refused_before_the_model_loads(tmp_path, capsys, monkeypatch,
                                                                                  name, container, error):
    import v2.cli.chat as chat

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(chat, "load_runtime", no_model)
    path = tmp_path / name
    if container is None:
        path.write_bytes(b"not audio " * 100)
    elif container == "":
        path.write_bytes(b"")
    else:
        sf.write(path, np.zeros(1600, np.float32), 16000, format=container)
    code = main(["chat", "--card", "qwen3_omni_tiny", "-m", "hi", "--audio", str(path), "-o", str(tmp_path / "r.wav"),
                 "-q"])
    assert code != 0
    assert f"error: --audio {path}: {error}" in capsys.readouterr().err
    assert not (tmp_path / "r.wav").exists()
