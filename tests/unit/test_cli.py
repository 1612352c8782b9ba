"""The command line: the main job on the embedded default card writes an audio file through the runtime; its
knobs reach the request; every expected failure is one `error: ...` line on stderr, without a traceback."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import soundfile as sf

from v2.card import known_cards, load_card
from v2.cli import build_parser, main
from v2.runtime.runtime import Runtime


def one_error_line(err: str) -> str:
    """The single line of stderr, checked to be an error line without a traceback."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("stream", [False, True])
def test_synth_writes_a_stereo_wav_and_codes(tmp_path, capsys, stream):
    out, codes_out = tmp_path / "speech.wav", tmp_path / "codes.npy"
    argv = ["synth", "Testing one two.", "-o", str(out), "--max-frames", "20", "--min-frames", "5", "--seed", "4",
            "--codes-out", str(codes_out)] + (["--stream"] if stream else [])
    assert main(argv) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out.strip().splitlines()[-1])
    codes = np.load(codes_out)
    assert codes.shape == (report["frames"], 12) and 5 <= report["frames"] <= 20
    assert report["finish_reason"] in ("stop", "length") and report["ttfa_s"] > 0
    audio, rate = sf.read(out)
    assert rate == 48000 and audio.shape == (report["frames"] * 3840, 2)
    assert np.abs(audio).max() > 0
    # not a terminal: one final line, counted to the real end
    assert captured.err == "" or captured.err.strip().startswith(f"{report['frames']} frames, ")


@pytest.mark.parametrize("name,fmt,args", [("a.flac", "FLAC", []), ("a.ogg", "OGG", ["--stream"]),
                                           ("a.mp3", "MP3", []), ("a.audio", "FLAC", ["--format", "flac"])])
def test_synth_writes_the_format_the_suffix_or_format_names(tmp_path, capsys, name, fmt, args):
    out = tmp_path / name
    assert main(["synth", "Hi.", "-o", str(out), "-q", "--min-frames", "4", "--max-frames", "4", *args]) == 0
    info = sf.info(out)
    assert info.format == fmt and info.samplerate == 48000 and info.channels == 2
    assert info.frames >= 4 * 3840 - 2048  # the lossy encoders may trim an edge


def test_the_knobs_reach_the_request(tmp_path, capsys, monkeypatch):
    seen = []
    submit = Runtime.submit
    monkeypatch.setattr(Runtime, "submit", lambda self, request: seen.append(request) or submit(self, request))
    assert main(["synth", "Hi.", "-o", str(tmp_path / "a.wav"), "-q", "--max-frames", "3", "--temperature", "0.5",
                 "--top-k", "7", "--top-p", "0.9", "--repetition-penalty", "1.2", "--duration", "2.0"]) == 0
    assert seen[0]["sampling"] == {"audio": {"temperature": 0.5, "top_k": 7, "top_p": 0.9}, "repetition_penalty": 1.2}
    assert seen[0]["duration_frames"] == 25 and seen[0]["max_frames"] == 3
    seen.clear()
    assert main(["synth", "Hi.", "-o", str(tmp_path / "a.wav"), "-q", "--max-frames", "3"]) == 0
    assert "sampling" not in seen[0] and "duration_frames" not in seen[0]  # the card's defaults


def test_cards_lists_every_card_with_its_description(capsys):
    assert main(["cards"]) == 0
    out = capsys.readouterr().out
    for name in known_cards():
        assert any(line.startswith(name) and load_card(name).description in line for line in out.splitlines())


def test_synth_help_shows_every_default(capsys):
    synth = build_parser()._subparsers._group_actions[0].choices["synth"]
    with pytest.raises(SystemExit) as done:
        main(["synth", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for action in synth._actions:
        if action.dest != "help":
            formatted = synth.formatter_class("v2")._get_help_string(action)
            assert "default" in formatted, action.dest
    assert "(default: moss_tts_local_tiny)" in text and "(default: out/speech.wav)" in text


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_loading_then_frames_up_to_the_real_end(tmp_path, capsys, monkeypatch):
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    assert main(["synth", "A few words.", "-o", str(tmp_path / "a.wav"), "--min-frames", "8", "--max-frames", "30",
                 "--stream"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    states = [s.strip() for s in term.getvalue().split("\r") if s.strip()]
    assert states[0] == "loading moss_tts_local_tiny on cpu ..." and states[1].startswith("loaded in ")
    counts = [int(s.split()[0]) for s in states[2:]]
    assert counts == sorted(counts) and counts[-1] == report["frames"]
    assert f"({report['finish_reason']}); the card's weights are seeded" in states[-1] and term.getvalue().endswith("\n")
    assert "600" not in term.getvalue()  # nothing measured against the card's frame cap


def test_a_failure_clears_the_status_line(tmp_path, capsys, monkeypatch):
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    assert main(["synth", "x", "-o", str(tmp_path / "a.wav"), "--voice", "nobody",
                 "--voices-dir", str(tmp_path / "voices")]) == 1
    visible = term.getvalue().split("\r")[-1]
    assert visible.startswith("error: --voice: no stored voice named 'nobody' in ") and visible.endswith(")\n")


def test_voices_add_list_remove_and_synth_with_a_voice_or_a_reference(tmp_path, capsys):
    t = np.arange(48000) / 48000
    speaker = tmp_path / "speaker.wav"
    sf.write(speaker, 0.3 * np.sin(2 * np.pi * 150 * t), 48000)  # mono: duplicated to stereo
    store = ["--voices-dir", str(tmp_path / "voices")]
    assert main(["voices", *store, "add", "alice", str(speaker), "--text", "Hello."]) == 0
    added = json.loads(capsys.readouterr().out.strip())
    assert added["name"] == "alice" and added["frames"] == 12 and added["text"] == "Hello."
    assert main(["voices", *store, "list", "--json"]) == 0
    assert [json.loads(line)["name"] for line in capsys.readouterr().out.strip().splitlines()] == ["alice"]
    for extra in (["--voice", "alice"], ["--reference", str(speaker)],
                  ["--reference", str(speaker), "--reference-text", "Hello."]):
        out = tmp_path / "cloned.wav"
        assert main(["synth", "More words.", "-o", str(out), "--max-frames", "6", "-q", *store, *extra]) == 0
        report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert report["frames"] >= 1 and sf.info(out).samplerate == 48000
    assert main(["voices", *store, "remove", "alice"]) == 0
    assert main(["voices", *store, "remove", "alice"]) == 1
    assert one_error_line(capsys.readouterr().err).startswith("error: voices remove: no stored voice named 'alice' in ")


def test_a_missing_folder_of_o_is_refused_and_nothing_is_created_unless_mkdir(tmp_path, capsys):
    out = tmp_path / "not" / "there" / "x.wav"
    assert main(["synth", "Hi.", "-o", str(out), "-q", "--max-frames", "2"]) != 0
    err = capsys.readouterr().err
    assert "-o" in err and "does not exist" in err and "--mkdir" in err
    assert not (tmp_path / "not").exists()
    assert main(["synth", "Hi.", "-o", str(out), "--mkdir", "-q", "--max-frames", "2"]) == 0
    assert out.stat().st_size > 44


def test_a_seeded_card_warns_that_it_makes_noise(tmp_path, capsys):
    """The runtime's audio is unchanged (the file holds what it made); the person at the terminal is told."""
    out = tmp_path / "a.wav"
    assert main(["synth", "Hi.", "-o", str(out), "--max-frames", "2"]) == 0
    assert "weights are seeded: this is noise, not speech" in capsys.readouterr().err
    assert main(["synth", "Hi.", "-o", str(out), "--max-frames", "2", "-q"]) == 0
    assert "seeded" not in capsys.readouterr().err
    assert main(["cards"]) == 0
    listing = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "noise" in listing["moss_tts_local_tiny"] and "noise" in listing["qwen3_tts_tiny"]
    assert "noise" not in listing["moss_tts_local_v1_5"]
