"""`v2 voices add NAME --speaker-embedding FILE`: a voice from a precomputed speaker embedding (a JSON list or
a 1-D .npy) on a card whose voices are x-vectors, equal to the recording's own; files that are not one, both
sources or neither, and a card whose voices are codes are refused with one error line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from v2.cli import build_parser, main
from v2.cli.voices import _store
from v2.card import load_card

CARD = ["--card", "qwen3_tts_tiny"]


def _x_vector(store_args: list[str], name: str) -> np.ndarray:
    args = build_parser().parse_args(["voices", *CARD, *store_args, "list"])
    return _store(args, load_card("qwen3_tts_tiny")).get(name).arrays["x_vector"]


def test_a_voice_from_an_embedding_file_holds_that_embedding(tmp_path: Path, capsys) -> None:
    t = np.arange(24000) / 24000
    wav = tmp_path / "speaker.wav"
    sf.write(wav, 0.3 * np.sin(2 * np.pi * 180 * t), 24000)
    store = ["--voices-dir", str(tmp_path / "voices")]
    assert main(["voices", *CARD, *store, "add", "recorded", str(wav)]) == 0
    xvector = _x_vector(store, "recorded")
    (tmp_path / "e.json").write_text(json.dumps(xvector.tolist()))
    np.save(tmp_path / "e.npy", xvector)
    capsys.readouterr()
    for name, file in (("from-json", "e.json"), ("from-npy", "e.npy")):
        assert main(["voices", *CARD, *store, "add", name, "--speaker-embedding", str(tmp_path / file)]) == 0
        added = json.loads(capsys.readouterr().out.strip())
        assert added["name"] == name and added["frames"] == 0 and added["arrays"] == ["x_vector"]
        assert np.array_equal(_x_vector(store, name), xvector)


def test_bad_embeddings_and_sources_are_one_error_line(tmp_path: Path, capsys) -> None:
    store = ["--voices-dir", str(tmp_path / "voices")]
    (tmp_path / "short.json").write_text("[0.5, 0.25]")
    (tmp_path / "words.json").write_text('["a", "b"]')
    (tmp_path / "broken.json").write_text("[0.5,")
    np.save(tmp_path / "matrix.npy", np.zeros((2, 64), np.float32))
    cases = [
        (["add", "v", "--speaker-embedding", str(tmp_path / "short.json")], "speaker_embedding"),
        (["add", "v", "--speaker-embedding", str(tmp_path / "words.json")], "list of numbers"),
        (["add", "v", "--speaker-embedding", str(tmp_path / "broken.json")], "not a JSON list"),
        (["add", "v", "--speaker-embedding", str(tmp_path / "matrix.npy")], "1-D array"),
        (["add", "v", "--speaker-embedding", str(tmp_path / "absent.json")], "cannot read it"),
        (["add", "v"], "one of the two"),
        (["add", "v", str(tmp_path / "x.wav"), "--speaker-embedding", str(tmp_path / "short.json")], "one of the two"),
    ]
    for argv, why in cases:
        assert main(["voices", *CARD, *store, *argv]) == 1, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and why in err[0], (argv, err)
    (tmp_path / "e.json").write_text(json.dumps([0.5] * 64))
    assert main(["voices", *store, "add", "v", "--speaker-embedding", str(tmp_path / "e.json")]) == 1  # MOSS
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "speaker_embedding" in err[0]
    assert not (tmp_path / "voices").exists() or not any((tmp_path / "voices").rglob("v*"))
