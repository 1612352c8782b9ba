"""The main job on the embedded default card writes its output."""

from __future__ import annotations

import json

import numpy as np
import pytest

from v2.cli import main


def test_synth_writes_codes(tmp_path, capsys):
    out = tmp_path / "codes.npy"
    assert main(["synth", "--text", "Testing one two.", "--max-frames", "20", "--seed", "4", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    codes = np.load(out)
    assert codes.shape == (report["frames"], 12) and 0 <= report["frames"] <= 20
    assert codes.dtype == np.int64 and (codes >= 0).all() and (codes < 1024).all()


def test_synth_refuses_frames_over_the_card_limit(tmp_path):
    with pytest.raises(SystemExit, match="max_frames"):
        main(["synth", "--max-frames", "100000", "--out", str(tmp_path / "c.npy")])
