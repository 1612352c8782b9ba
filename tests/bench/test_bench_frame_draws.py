"""`python -m v2.bench.frame_draws` runs every shipped frame shape, prints JSON, and its A/B checks the bits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from v2.bench import frame_draws
from v2.models import frame_sampler


def test_ab_against_a_copy_prints_equal_bits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "frame_sampler_copy.py"
    copy.write_text(Path(frame_sampler.__file__).read_text())
    report = frame_draws.main(["--against", str(copy), "--repeat", "1", "--frames", "1", "--batches", "1", "3"])
    assert json.loads(capsys.readouterr().out) == report
    assert set(report) == {f"{f}_b{b}" for f in frame_draws.SHAPES for b in (1, 3)}
    assert all(row["same_bits"] is True and float(row["ms"]) > 0 for row in report.values())


def test_bad_counts_are_refused() -> None:
    with pytest.raises(SystemExit, match="--repeat"):
        frame_draws.main(["--repeat", "0"])
