"""Every expected failure of the command line is one `error: ...` line on stderr and a non-zero exit, without
a traceback; `--debug` adds the traceback. A few run as users run them (`python -m v2` in a subprocess), the
rest call `main()`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from v2.cli import main
from v2.runtime.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present here")


def failure(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 1) -> str:
    """Run main(argv), expecting exit `code`; the one error line it printed."""
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's usage errors exit from parse_args
        rc = e.code
    captured = capsys.readouterr()
    assert rc == code, captured.err
    assert "Traceback" not in captured.err, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


@pytest.fixture
def no_synthesis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a runtime fails the test: the failure must be found before any model loads."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a runtime was loaded")

    monkeypatch.setattr(Runtime, "from_card", refuse)


@pytest.mark.parametrize("args,message", [
    (["--card", "nope"], "error: card 'nope' not found (known cards: "),
    (["--device", "foo"], "error: --device 'foo': not a device"),
    (["-o", "{tmp}"], "error: --out {tmp}: is a directory"),
    (["-o", "{tmp}/file.txt/x.wav"], "error: --out {tmp}/file.txt/x.wav: {tmp}/file.txt is a file, not a folder"),
    (["-o", "{tmp}/x.aiff"], "error: --out {tmp}/x.aiff: cannot tell the format from the suffix '.aiff'"),
    (["--codes-out", "{tmp}"], "error: --codes-out {tmp}: is a directory"),
])
def test_found_before_anything_loads(tmp_path, capsys, no_synthesis, args, message):
    (tmp_path / "file.txt").write_text("not a folder")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "-o" not in argv:
        argv += ["-o", str(tmp_path / "x.wav")]
    assert failure(["synth", "Hi.", *argv], capsys).startswith(message.replace("{tmp}", str(tmp_path)))
    assert not (tmp_path / "x.wav").exists()


@pytest.mark.parametrize("args,message", [
    (["--temperature", "9"], "error: argument --temperature: must be 0 (greedy) or lie in [0.25, 3.0], got 9.0"),
    (["--temperature", "warm"], "error: argument --temperature: expected a number, got 'warm'"),
    (["--top-p", "0"], "error: argument --top-p: must lie in (0, 1], got 0.0"),
    (["--top-p", "nan"], "error: argument --top-p: must lie in (0, 1], got nan"),
    (["--top-k", "-1"], "error: argument --top-k: must lie in [0, "),
    (["--repetition-penalty", "5"], "error: argument --repetition-penalty: must lie in [0.8, 2.0]"),
    (["--duration", "0"], "error: argument --duration: must be a positive number of seconds, got '0'"),
    (["--duration", "inf"], "error: argument --duration: must be a positive number of seconds"),
    (["--max-frames", "-3"], "error: argument --max-frames: must lie in [0, "),
    (["--format", "aiff"], "error: argument --format: invalid choice: 'aiff'"),
    (["--no-such-option"], "error: unrecognized arguments: --no-such-option"),
])
def test_a_bad_option_value_is_one_line_naming_the_option(tmp_path, capsys, no_synthesis, args, message):
    assert failure(["synth", "Hi.", "-o", str(tmp_path / "x.wav"), *args], capsys, code=2).startswith(message)


@no_cuda
def test_device_cuda_without_cuda(tmp_path, capsys, no_synthesis):
    line = failure(["synth", "Hi.", "-o", str(tmp_path / "x.wav"), "--device", "cuda"], capsys)
    assert line.startswith("error: --device cuda: CUDA is not available")


@pytest.mark.parametrize("args,message", [
    (["--max-frames", "100000"], "error: --max-frames: 100000 exceeds the card's cap"),
    (["--max-frames", "10", "--min-frames", "11"], "error: --min-frames (11) exceeds --max-frames (10)"),
    (["--voice", "nobody"], "error: --voice: no stored voice named 'nobody'"),
    (["--reference", "{tmp}/none.wav"], "error: --reference: no such file"),
    (["--reference", "{tmp}/noise.wav"], "error: --reference: "),
    (["--reference-text", "Hello."], "error: --reference-text: continuation needs exactly one reference"),
    (["--checkpoint", "{tmp}/missing"], "error: checkpoint directory not found: {tmp}/missing"),
    (["--checkpoint", "{tmp}/noise.wav"], "error: checkpoint '{tmp}/noise.wav': "),
])
def test_a_refused_request_or_input_is_one_line(tmp_path, capsys, args, message):
    (tmp_path / "noise.wav").write_bytes(b"RIFF....WAVEnot really")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    line = failure(["synth", "Hi.", "-o", str(tmp_path / "x.wav"), "-q", "--voices-dir", str(tmp_path / "v"), *argv],
                   capsys)
    assert line.startswith(message.replace("{tmp}", str(tmp_path)))
    assert not (tmp_path / "x.wav").exists()


def test_an_unreadable_recording_for_voices_add_is_one_line(tmp_path, capsys):
    t = np.arange(4800) / 48000
    sf.write(tmp_path / "short.wav", np.sin(2 * np.pi * 100 * t), 48000)
    (tmp_path / "bad.wav").write_bytes(b"garbage")
    store = ["--voices-dir", str(tmp_path / "v")]
    assert failure(["voices", *store, "add", "bob", str(tmp_path / "bad.wav")], capsys).startswith("error: ")
    assert failure(["voices", *store, "add", "../x", str(tmp_path / "short.wav")], capsys).startswith(
        "error: voice: name must be")


def test_serve_failures_are_one_line(capsys):
    assert failure(["serve", "--card", "nope"], capsys).startswith("error: card 'nope' not found")
    if not torch.cuda.is_available():
        assert failure(["serve", "--device", "cuda"], capsys).startswith("error: --device cuda: CUDA is not available")


def test_debug_shows_the_traceback_then_the_error_line(capsys):
    for argv in (["synth", "--card", "nope", "--debug"], ["--debug", "synth", "--card", "nope"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("Traceback") and "CardError" in err
        assert err.strip().splitlines()[-1].startswith("error: card 'nope' not found")


def python_m_v2(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "v2", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args,code,message", [
    (["synth", "Hi.", "--card", "nope"], 1, "error: card 'nope' not found"),
    (["synth", "Hi.", "--top-k", "many"], 2, "error: argument --top-k: expected a whole number, got 'many'"),
    (["synth", "Hi.", "-o", "out.wma"], 1, "error: --out out.wma: cannot tell the format from the suffix '.wma'"),
    (["nonsense"], 2, "error: argument COMMAND: invalid choice: 'nonsense'"),
    pytest.param(["synth", "Hi.", "--device", "cuda"], 1, "error: --device cuda: CUDA is not available",
                 marks=no_cuda),
])
def test_python_m_v2_failures_are_one_line(tmp_path, args, code, message):
    done = python_m_v2(*args, cwd=tmp_path)
    assert done.returncode == code and done.stdout == ""
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(message), done.stderr
