"""`v2 synth --timestamps [PATH]` (the words in the summary line and, with PATH, as JSON there; the seeded aligner
for a seeded card) and `v2 serve --aligner ALIGNER` (an unknown aligner one line before anything loads; the
option reaches `Runtime.from_card`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from v2.cli import build_parser, main
from v2.models.forced_aligner.words import split_words

TEXT = "Hello there. A second line!"


def test_synth_writes_the_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, words = tmp_path / "a.wav", tmp_path / "words.json"
    assert main(["synth", TEXT, "-o", str(out), "-q", "--card", "qwen3_tts_tiny", "--device", "cpu",
                 "--max-frames", "8", "--timestamps", str(words)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    written = json.loads(words.read_text())
    assert written == summary["words"] and [w["word"] for w in written] == split_words(TEXT)
    assert all(0 <= w["start"] <= w["end"] <= summary["audio_seconds"] for w in written)
    assert main(["synth", TEXT, "-o", str(out), "-q", "--card", "qwen3_tts_tiny", "--device", "cpu",
                 "--max-frames", "8"]) == 0
    assert "words" not in json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_serve_refuses_an_unknown_aligner_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--card", "qwen3_tts_tiny", "--device", "cpu", "--port", "0", "--aligner", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --aligner: aligner: 'nope' is no aligner card") and err.count("\n") == 1


class Stop(Exception):
    pass


def test_serve_hands_the_aligner_to_the_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi", reason="the server needs its extra: pip install v2[server]")
    from v2.server import serve

    seen: dict[str, Any] = {}

    def from_card(card: str, **kw: Any) -> Any:
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(serve.Runtime, "from_card", from_card)
    args = build_parser().parse_args(["serve", "--card", "qwen3_tts_tiny", "--port", "0", "--aligner",
                                      "forced_aligner_tiny"])
    with pytest.raises(Stop):
        serve.run(args)
    assert seen["aligner"] == "forced_aligner_tiny"


def test_cards_lists_the_aligners_apart(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cards"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in ("forced_aligner_tiny", "forced_aligner_0_6b"):
        assert any(line.startswith(name) and line.endswith(f"(aligner: --aligner {name})") for line in lines)
