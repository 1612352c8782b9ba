"""The main job on the embedded default card writes a wav file (and the codes it came from)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from v2.cli import main


def test_synth_writes_a_stereo_wav_and_codes(tmp_path, capsys):
    out, codes_out = tmp_path / "speech.wav", tmp_path / "codes.npy"
    argv = ["synth", "--text", "Testing one two.", "--max-frames", "20", "--min-frames", "5", "--seed", "4",
            "--out", str(out), "--codes-out", str(codes_out)]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    codes = np.load(codes_out)
    assert codes.shape == (report["frames"], 12) and 5 <= report["frames"] <= 20
    assert codes.dtype == np.int64 and (codes >= 0).all() and (codes < 1024).all()
    audio, rate = sf.read(out)
    assert rate == 48000 and audio.shape == (report["frames"] * 3840, 2)
    assert np.abs(audio).max() > 0


@pytest.mark.parametrize("args,field", [(["--max-frames", "100000"], "max_frames"),
                                        (["--max-frames", "10", "--min-frames", "11"], "min_frames")])
def test_synth_refuses_out_of_range_frames(tmp_path, args, field):
    with pytest.raises(SystemExit, match=field):
        main(["synth", *args, "--out", str(tmp_path / "s.wav")])
