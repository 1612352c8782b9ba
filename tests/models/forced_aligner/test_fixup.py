"""The release's timestamp fix-up on the fixture's hand-made sequences and cases: values and branches."""

from __future__ import annotations

import pytest

from tests.models.forced_aligner.conftest import CASES
from v2.models.forced_aligner.fixup import WordTime, fix_timestamps, fixup_branches, word_times


def test_hand_made_cases(fmeta: dict) -> None:
    cases = fmeta["postprocessing_cases"]
    seen = set()
    for c in cases:
        assert fix_timestamps(c["raw_ms"]) == c["fixed_ms"], c["classes"]
        assert fixup_branches(c["raw_ms"]) == c["branches"], c["classes"]
        seen.update(c["branches"])
    assert seen == {"snap", "snap_edge", "interp", "fill_edge"}


@pytest.mark.parametrize("case", CASES)
def test_fixture_cases(fmeta: dict, case: str) -> None:
    c = fmeta["cases"][case]
    assert fix_timestamps(c["raw_ms"]) == c["fixed_ms"]
    assert fixup_branches(c["raw_ms"]) == c["fixup_branches"]
    want = [WordTime(t["word"], t["start"], t["end"]) for t in c["timestamps"]]
    assert word_times(c["words"], c["fixed_ms"]) == want


def test_corners() -> None:
    assert fix_timestamps([]) == []
    assert fix_timestamps([7.0]) == [7]
    # a tie between neighbours goes left; a fractional interpolation is truncated toward zero
    assert fix_timestamps([0.0, 5.0, 1.0, 2.0]) == [0, 0, 1, 2]
    assert fix_timestamps([0.0, 9.0, 2.0]) == [0, 9, 9]  # equal-length runs: the first one found is kept
    assert fix_timestamps([0.0, 9.0, 9.0, 9.0, 10.0]) == [0, 9, 9, 9, 10]
    assert fix_timestamps([0.0, 50.0, 40.0, 30.0, 10.0, 11.0]) == [0, 2, 5, 7, 10, 11]  # 2.5, 5, 7.5
    assert fixup_branches([0.0, 50.0, 40.0, 30.0, 10.0, 11.0]) == ["interp"]


def test_word_times_round_and_check() -> None:
    assert word_times(["a"], [1234, 5678]) == [WordTime("a", 1.234, 5.678)]
    with pytest.raises(ValueError, match="fixed_ms: 3 marker times for 1 words"):
        word_times(["a"], [1, 2, 3])
