"""`--plot FILE.png` on the benchmarks that sweep a parameter draws the sweep: `python -m v2.bench` (audio-s/s
and TTFA against concurrency, the sequential baseline drawn across) and `python -m v2.bench.http` (in-process
against HTTP), on tiny sweeps; the file is a PNG that reads back as a picture. (`v2.bench.engine --plot`
runs in tests/bench/test_bench_engine.py, inside its one quick run.) Without matplotlib, or with a path that
cannot be drawn to, the run is refused before it starts, with the fix named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_picture(path: Path) -> None:
    import matplotlib.image

    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_MAGIC)
    pixels = matplotlib.image.imread(path)  # decodes: a whole, valid picture
    height, width = pixels.shape[:2]
    assert width > 600 and height > 300 and pixels.std() > 0.05  # drawn on, not a blank canvas


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_serving_bench_draws_its_concurrency_sweep(tmp_path, capsys):
    from v2.bench.__main__ import main

    picture = tmp_path / "plots" / "serving.png"
    assert main(["--quick", "--no-progress", "--requests", "3", "--max-frames", "6", "--concurrency", "1", "2",
                 "--plot", str(picture)]) == 0
    report = last_json(capsys.readouterr().out)
    assert report["plot"] == str(picture) and [s["concurrency"] for s in report["scenarios"]] == [1, 1, 2, 2]
    assert_picture(picture)


def test_http_bench_draws_its_concurrency_sweep(tmp_path, capsys):
    from v2.bench.http import main

    picture = tmp_path / "http.png"
    assert main(["--concurrency", "1", "2", "--requests", "2", "--max-frames", "6", "--repeat", "1",
                 "--plot", str(picture)]) == 0
    report = last_json(capsys.readouterr().out)
    assert report["plot"] == str(picture) and [r["concurrency"] for r in report["levels"]] == [1, 2]
    assert_picture(picture)


@pytest.mark.parametrize("bench", ["v2.bench", "v2.bench.http", "v2.bench.engine"])
def test_without_matplotlib_the_run_is_refused_before_it_starts(tmp_path, bench):
    hide = ("import runpy, sys; sys.modules['matplotlib'] = None; "
            f"runpy.run_module({bench!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", hide, "--plot", str(tmp_path / "x.png")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
    assert "--plot needs matplotlib: pip install -e \".[plot]\"" in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("name,message", [("x.txt", "give a .png, .svg, .pdf file"), ("dir", "is a directory")])
def test_a_path_that_cannot_be_drawn_to_is_refused_before_the_run(tmp_path, capsys, name, message):
    from v2.bench.__main__ import main

    (tmp_path / "dir").mkdir()
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(SystemExit) as refused:
        main(["--plot", str(tmp_path / (name if name != "dir" else "dir.png"))])
    assert refused.value.code == 2 and message in capsys.readouterr().err
