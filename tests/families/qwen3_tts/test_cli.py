"""`v2 synth` with a Qwen3-TTS card: a CustomVoice speaker by name, 24 kHz mono out; `v2 cards` lists the family."""

from __future__ import annotations

import json

import soundfile as sf

from v2.cli import main


def test_synth_a_speaker(tmp_path, capsys):
    out = tmp_path / "x.wav"
    assert main(["synth", "--card", "qwen3_tts_tiny", "Hello.", "-o", str(out), "--speaker", "vivian",
                 "--max-frames", "4", "--text-feed", "streaming", "--temperature", "0", "-q"]) == 0
    report = json.loads(capsys.readouterr().out)
    audio, rate = sf.read(out)
    assert (rate, audio.ndim, report["channels"], report["frames"]) == (24000, 1, 1, 4)
    assert len(audio) == 4 * 1920


def test_synth_refusals_name_the_option(tmp_path, capsys):
    assert main(["synth", "--card", "qwen3_tts_tiny", "Hello.", "-o", str(tmp_path / "y.wav"),
                 "--speaker", "nobody", "-q"]) != 0
    assert "error: --speaker: 'nobody' is not a speaker of this checkpoint" in capsys.readouterr().err


def test_cards_lists_the_family(capsys):
    assert main(["cards"]) == 0
    listed = capsys.readouterr().out
    for name in ("qwen3_tts_tiny", "qwen3_tts_12hz_0_6b_base", "qwen3_tts_12hz_1_7b_base", "qwen3_tts_12hz_0_6b_custom_voice",
                 "qwen3_tts_12hz_1_7b_custom_voice", "qwen3_tts_12hz_1_7b_voice_design"):
        assert name in listed
