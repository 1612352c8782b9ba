"""`v2 synth --format` takes every format the server streams: opus (Ogg) and aac (ADTS) are written by the
server's own encoder (v2/server/audio.py, PyAV), whole or chunk by chunk, without the server's web parts; a
machine without PyAV is told the README's command for the extra that brings it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest

from v2.audiofile import FORMATS, INSTALL_RAY, INSTALL_SERVER, AudioWriter, OutputError, format_for, write_audio
from v2.cli import main
from v2.server.audio import FORMATS as SERVED

ROOT = Path(__file__).resolve().parents[2]


def _decoded(path: Path) -> tuple[str, int, int, int]:
    """(codec, rate, channels, samples) of an audio file, as FFmpeg decodes it."""
    with av.open(str(path)) as f:
        stream = f.streams.audio[0]
        samples = sum(frame.samples for frame in f.decode(stream))
        return stream.codec_context.name, stream.rate, stream.channels, samples


def test_every_file_format_the_server_streams_is_a_synth_format():
    assert set(SERVED) - {"pcm"} <= set(FORMATS)  # pcm: headerless samples, an HTTP stream's format, no file's


@pytest.mark.parametrize("fmt, codec", [("opus", "opus"), ("aac", "aac")])
@pytest.mark.parametrize("chunked", [False, True])
def test_opus_and_aac_files_decode_at_the_rate_and_channels_given(tmp_path, fmt, codec, chunked):
    assert format_for(tmp_path / f"x.{fmt}") == fmt and format_for(tmp_path / "x.bin", fmt) == fmt
    rate, n = 48000, 48000
    audio = 0.3 * np.sin(2 * np.pi * 220 * np.arange(n) / rate)[None].repeat(2, axis=0)
    path = tmp_path / f"x.{fmt}"
    if chunked:
        with AudioWriter(path, fmt, rate, 2) as out:
            for start in range(0, n, 3840):
                out.write(audio[:, start:start + 3840])
    else:
        write_audio(path, fmt, audio, rate)
    got_codec, got_rate, channels, samples = _decoded(path)
    assert (got_codec, got_rate, channels) == (codec, rate, 2)
    assert abs(samples - n) <= 2048  # the codec's priming and last frame, at most


def test_a_rate_the_format_cannot_hold_is_resampled_to_48k(tmp_path):
    write_audio(tmp_path / "x.opus", "opus", np.zeros((1, 22050), np.float32), 22050)
    assert _decoded(tmp_path / "x.opus")[1:3] == (48000, 1)


def test_without_pyav_the_readmes_install_command_is_named(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    with pytest.raises(OutputError) as e:
        format_for(tmp_path / "x.opus")
    assert str(e.value) == f"--format opus: needs PyAV, which the server extra installs: {INSTALL_SERVER}"
    assert f"`{INSTALL_SERVER}`" in (ROOT / "README.md").read_text()


def test_writing_opus_loads_none_of_the_servers_web_parts(tmp_path):
    code = (f"import sys, numpy as np\nfrom v2.audiofile import write_audio\n"
            f"write_audio({str(tmp_path / 'x.opus')!r}, 'opus', np.zeros((2, 4800), np.float32), 48000)\n"
            "print(sorted(m for m in ('fastapi', 'starlette', 'uvicorn', 'v2.server.app') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr[-2000:]


@pytest.mark.parametrize("fmt, stream", [("opus", False), ("aac", True)])
def test_synth_writes_opus_and_aac(tmp_path, capsys, fmt, stream):
    out = tmp_path / f"speech.{fmt}"
    argv = ["synth", "Testing.", "-o", str(out), "--max-frames", "6", "-q", *(["--stream"] if stream else [])]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    codec, rate, channels, samples = _decoded(out)
    assert (report["format"], codec, rate, channels) == (fmt, fmt, report["sample_rate"], report["channels"])
    assert abs(samples - round(report["audio_seconds"] * rate)) <= 2048


@pytest.mark.parametrize("argv, module, command", [(["serve"], "v2.server.serve", INSTALL_SERVER),
                                                   (["serve", "--replicas", "2", "--port", "8000"], "v2.cluster.serve",
                                                    INSTALL_RAY)])
def test_a_missing_extra_is_named_with_the_readmes_command(argv, module, command, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # `from MODULE import ...` raises ImportError
    assert main([*argv, "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith(f": {command}") and len(err.splitlines()) == 1, err
    assert f"`{command}`" in (ROOT / "README.md").read_text()
