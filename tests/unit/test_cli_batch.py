"""`v2 synth --batch items.jsonl -o DIR`: each line's options over the command line's, every item run
together, one file each (named by its `id`/`name` or its line number, as its errors are) holding the runtime's own audio for that
request; a bad line reported as `error: FILE:LINE: FIELD: why` while the others are still written; exit 1 if
any failed, 0 if none; what --batch cannot go with is refused before any model loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from v2.audiofile import write_audio
from v2.cli import main
from v2.runtime.runtime import Runtime

CARD = "moss_tts_local_tiny"


@pytest.fixture(scope="module")
def runtime():
    with Runtime.from_card(CARD) as rt:
        yield rt


def _write(path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_good_lines_are_written_and_bad_ones_named_by_line_and_field(tmp_path, capsys, runtime):
    items = _write(tmp_path / "items.jsonl", [
        json.dumps({"text": "First line here.", "seed": 1, "id": "first"}),
        json.dumps({"text": "Second line.", "seed": "x"}),
        "",
        json.dumps({"text": "Third line.", "max-frames": 5, "format": "flac", "temperature": 0.7}),
        "not json",
        json.dumps({"text": "Fifth.", "bogus": 1}),
        json.dumps({"seed": 3}),
        json.dumps({"text": "Seventh.", "name": "first"}),
        json.dumps({"text": "Eighth.", "voice": "nobody"}),
        json.dumps({"text": "Ninth.", "top_k": -2}),
    ])
    out = tmp_path / "out"
    argv = ["synth", "--batch", items, "-o", str(out), "--mkdir", "--card", CARD, "--max-frames", "8", "--seed",
            "2", "-q", "--voices-dir", str(tmp_path / "voices")]
    assert main(argv) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert (report["items"], report["succeeded"], report["failed"]) == (9, 2, 7)
    assert report["files"] == ["first.wav", None, "004.flac", None, None, None, None, None, None]
    errors = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    fields = [line.split(": ")[1].rsplit(":", 1)[1] + ":" + line.split(": ")[2] for line in errors]
    assert [e.split(":")[0] for e in fields] == ["2", "5", "6", "7", "8", "9", "10"], errors
    assert [e.split(":")[1] for e in fields] == ["seed", "line", "bogus", "text", "name", "voice", "top_k"], errors
    assert report["errors"]["9"] == (f"voice: no stored voice named 'nobody' in {tmp_path / 'voices'} (none stored; "
                                     "see v2 voices list)")  # the stored ones and where, as synth's --voice says
    assert sorted(p.name for p in out.iterdir()) == ["004.flac", "first.wav"]
    for name, request in (("first.wav", {"text": "First line here.", "seed": 1, "max_frames": 8}),
                          ("004.flac", {"text": "Third line.", "seed": 2, "max_frames": 5,
                                        "sampling": {"audio": {"temperature": 0.7}}})):
        want = runtime.submit(request).result(120)  # the same request in process, written the same way
        write_audio(tmp_path / name, name.rsplit(".", 1)[1], want.audio, want.sample_rate)
        got, rate = sf.read(out / name, dtype="int16")
        ref, ref_rate = sf.read(tmp_path / name, dtype="int16")
        assert rate == ref_rate == want.sample_rate and len(got) == want.audio.shape[1] > 0
        assert np.array_equal(got, ref)


def test_every_line_good_exits_zero(tmp_path, capsys):
    items = _write(tmp_path / "items.jsonl", [json.dumps({"text": f"Line {i}.", "seed": i}) for i in range(3)])
    argv = ["synth", "--batch", items, "-o", str(tmp_path), "--card", CARD, "--max-frames", "4", "-q"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["files"] == ["001.wav", "002.wav", "003.wav"] and report["failed"] == 0


@pytest.mark.parametrize("extra, message", [
    (["Some text."], "TEXT: not with --batch"), (["--stream"], "--stream: not with --batch"),
    (["--codes-out", "c.npy"], "--codes-out: not with --batch"),
])
def test_what_batch_cannot_go_with_is_refused(tmp_path, capsys, extra, message):
    items = _write(tmp_path / "items.jsonl", [json.dumps({"text": "x"})])
    assert main(["synth", "--batch", items, "-o", str(tmp_path), *extra]) == 1
    assert message in capsys.readouterr().err


def test_the_output_folder_is_checked(tmp_path, capsys):
    items = _write(tmp_path / "items.jsonl", [json.dumps({"text": "x"})])
    assert main(["synth", "--batch", items]) == 1
    assert "-o: give the folder" in capsys.readouterr().err
    assert main(["synth", "--batch", items, "-o", str(tmp_path / "missing")]) == 1
    assert "no such folder" in capsys.readouterr().err
    assert main(["synth", "--batch", items, "-o", items]) == 1
    assert "not a folder" in capsys.readouterr().err
    assert main(["synth", "--batch", str(tmp_path / "nothing.jsonl"), "-o", str(tmp_path)]) == 1
    assert "cannot be read" in capsys.readouterr().err
