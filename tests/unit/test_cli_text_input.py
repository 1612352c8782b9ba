"""`v2 synth` reads its text from the argument, a file (`--text-file`) or stdin (`-`), the same text giving the
same codes; a relative `-o` lands in the caller's directory and is reported as an absolute path. The
subprocess runs are `python -m v2` from a folder outside the checkout, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from v2.cli import main
from v2.cli.synth import MAX_TEXT_FILE_BYTES

ROOT = Path(__file__).resolve().parents[2]
TEXT = "The river runs past old stone houses."
SMALL = ["-q", "--seed", "3", "--max-frames", "6"]


def python_m_v2(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "v2", *args], cwd=cwd, env=env, input=stdin, capture_output=True,
                          timeout=180)


def report(done: subprocess.CompletedProcess[bytes]) -> dict:
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def test_stdin_and_a_relative_out_from_another_directory(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    by_stdin = report(python_m_v2("synth", "-", "-o", "speech/a.wav", "--mkdir", "--codes-out", "a.npy", *SMALL, cwd=elsewhere,
                                  stdin=(TEXT + "\n").encode()))
    assert by_stdin["out"] == str(elsewhere / "speech" / "a.wav") and Path(by_stdin["out"]).stat().st_size > 44
    by_arg = report(python_m_v2("synth", TEXT, "-o", "b.wav", "--codes-out", "b.npy", *SMALL, cwd=elsewhere))
    assert by_arg["out"] == str(elsewhere / "b.wav")
    assert np.array_equal(np.load(elsewhere / "a.npy"), np.load(elsewhere / "b.npy"))  # the same text was spoken


def test_a_text_file_says_what_the_argument_says(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("notes.txt").write_text("\ufeff" + TEXT + "\n\n", encoding="utf-8")  # a BOM and trailing lines: dropped
    assert main(["synth", "--text-file", "notes.txt", "-o", "f.wav", "--codes-out", "f.npy", *SMALL]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["out"] == str(tmp_path / "f.wav")
    assert main(["synth", TEXT, "-o", "g.wav", "--codes-out", "g.npy", *SMALL]) == 0
    assert np.array_equal(np.load("f.npy"), np.load("g.npy"))


@pytest.mark.parametrize("content,args,message", [
    (None, ["--text-file", "{tmp}/none.txt"], "error: --text-file {tmp}/none.txt: cannot be read (No such file"),
    (b"\xff\xfe\x00bad", ["--text-file", "{tmp}/t.txt"], "error: --text-file {tmp}/t.txt: not UTF-8 text (byte 0)"),
    (b" \n\t\n", ["--text-file", "{tmp}/t.txt"], "error: --text-file {tmp}/t.txt: no text in it"),
    (b"x" * (MAX_TEXT_FILE_BYTES + 1), ["--text-file", "{tmp}/t.txt"],
     f"error: --text-file {{tmp}}/t.txt: over {MAX_TEXT_FILE_BYTES} bytes"),
    (b"Hello.", ["Hello.", "--text-file", "{tmp}/t.txt"], "error: --text-file: give the text or --text-file, not both"),
    (b"x" * 20_001, ["--text-file", "{tmp}/t.txt"], "error: --text-file: 20001 characters, over the card's"),
])
def test_a_bad_text_file_is_one_line(tmp_path, capsys, content, args, message):
    if content is not None:
        (tmp_path / "t.txt").write_bytes(content)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert main(["synth", *argv, "-o", str(tmp_path / "x.wav"), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(message.replace("{tmp}", str(tmp_path))), err
    assert not (tmp_path / "x.wav").exists()


def test_empty_stdin_is_one_line(tmp_path):
    done = python_m_v2("synth", "-", "-o", "x.wav", "-q", cwd=tmp_path, stdin=b"")
    assert done.returncode == 1 and done.stderr.decode() == "error: stdin (-): no text in it\n"
    assert not (tmp_path / "x.wav").exists()
