"""The main job on the embedded default card writes a wav file through the runtime."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from v2.cli import main


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
    assert "s of audio" in captured.err  # the progress bar


@pytest.mark.parametrize("args,field", [(["--max-frames", "100000"], "max_frames"),
                                        (["--max-frames", "10", "--min-frames", "11"], "min_frames")])
def test_synth_refuses_out_of_range_frames(tmp_path, args, field):
    with pytest.raises(SystemExit, match=field):
        main(["synth", *args, "-o", str(tmp_path / "s.wav")])


def test_voices_add_list_remove_and_synth_with_a_voice_or_a_reference(tmp_path, capsys):
    t = np.arange(48000) / 48000
    speaker = tmp_path / "speaker.wav"
    sf.write(speaker, 0.3 * np.sin(2 * np.pi * 150 * t), 48000)  # mono: duplicated to stereo
    store = ["--voices-dir", str(tmp_path / "voices")]
    assert main(["voices", *store, "add", "alice", str(speaker), "--text", "Hello."]) == 0
    added = json.loads(capsys.readouterr().out.strip())
    assert added["name"] == "alice" and added["frames"] == 12 and added["text"] == "Hello."
    assert main(["voices", *store, "list"]) == 0
    assert [json.loads(line)["name"] for line in capsys.readouterr().out.strip().splitlines()] == ["alice"]
    for extra in (["--voice", "alice"], ["--reference", str(speaker)],
                  ["--reference", str(speaker), "--reference-text", "Hello."]):
        out = tmp_path / "cloned.wav"
        assert main(["synth", "More words.", "-o", str(out), "--max-frames", "6", "-q", *store, *extra]) == 0
        report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert report["frames"] >= 1 and sf.info(out).samplerate == 48000
    assert main(["voices", *store, "remove", "alice"]) == 0
    with pytest.raises(SystemExit, match="voice: no stored voice named 'alice'"):
        main(["synth", "x", "-o", str(tmp_path / "x.wav"), *store, "--voice", "alice"])
    with pytest.raises(SystemExit, match="reference_audio: no such file"):
        main(["synth", "x", "-o", str(tmp_path / "x.wav"), *store, "--reference", str(tmp_path / "none.wav")])
