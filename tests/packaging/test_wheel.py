"""The built wheel, installed (not editable) into a throw-away venv, works from any working directory.

The wheel is built from a copy of the project (pyproject.toml, setup.py, README.md, v2/, cards/) with this
venv's setuptools, and installed with `--no-deps --no-index`; the throw-away venv sees this venv's
site-packages (torch, numpy, ...) through a .pth file, so nothing is downloaded and no other torch can be
pulled in. Every command runs in an empty temporary folder, far from the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ["pyproject.toml", "setup.py", "README.md", "v2", "cards"]
# a family's shapes file that pyproject.toml has never heard of, added to the copy the wheel is built from
FAMILY = sorted(p.name for p in (ROOT / "v2" / "families").iterdir() if (p / "family.py").is_file())[0]
PROBE_SHAPES = f"v2/families/{FAMILY}/shapes/probe_shapes.json"


def _run(cmd: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("wheel")
    src, dist, venv, work = base / "src", base / "dist", base / "venv", base / "work"
    src.mkdir()
    for name in PROJECT:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    (src / PROBE_SHAPES).parent.mkdir(exist_ok=True)
    (src / PROBE_SHAPES).write_text("{}")
    dist.mkdir()
    built = _run([sys.executable, "-c", "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))",
                  str(dist)], cwd=src)
    wheel = dist / built.stdout.strip().splitlines()[-1]
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index",
          str(wheel)], cwd=base)
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=base).stdout.strip())
    (purelib / "_v2_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work.mkdir()
    return {"wheel": wheel, "venv": venv, "python": python, "purelib": purelib, "work": work}


def test_the_wheel_carries_the_cards_the_marker_and_the_package_data(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    cards = {f"v2/cards/{p.name}" for p in (ROOT / "cards").glob("*.toml")}
    assert cards and cards <= names
    assert {"v2/py.typed", "v2/server/static/index.html", "v2/cli/__init__.py", "v2/checkpoints.py"} <= names
    shapes = {str(p.relative_to(ROOT)) for p in (ROOT / "v2" / "families").glob("*/shapes/*.json")}
    assert len(shapes) >= 4 and shapes <= names  # each family's release shapes, package data next to it
    assert PROBE_SHAPES in names  # any family's: pyproject.toml names no family
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "v2").rglob("__init__.py")}
    assert {f"{p}/__init__.py" for p in packages} <= names  # every subpackage
    assert not any(n.startswith(("tests/", "cards/", "designs/")) for n in names)
    metadata = zipfile.ZipFile(installed["wheel"]).read("v2-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Dist: huggingface_hub" in metadata and "Requires-Dist: torch" in metadata


def test_the_package_data_names_no_family():
    """A family's `shapes/` ride along by one pattern for every family, not a line per family."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert not [key for key in data if key.startswith("v2.families.")], data
    assert "*/shapes/*.json" in data["v2.families"]


def test_the_console_script_runs_the_main_job_from_an_empty_folder(installed):
    v2 = installed["venv"] / "bin" / "v2"
    cards = _run([str(v2), "cards"], cwd=installed["work"]).stdout
    assert "moss_tts_local_tiny" in cards and "moss_tts_local_v1_5" in cards
    usage = _run([str(v2), "--help"], cwd=installed["work"]).stdout
    assert all(command in usage for command in ("synth", "voices", "cards", "serve"))
    done = _run([str(v2), "synth", "hi", "-o", "x.wav", "--max-frames", "8", "--seed", "1"], cwd=installed["work"])
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["finish_reason"] in ("stop", "length") and (installed["work"] / "x.wav").stat().st_size > 44


def test_the_installed_package_runs_the_runtime_and_imports_cheaply(installed):
    script = """
import json, re, sys
from importlib import metadata, resources
import v2
assert "torch" not in sys.modules, "import v2 loaded torch"
from v2 import AudioChunk, Runtime, SpeechRequest, SpeechResult, Trajectory
from v2.card import CARDS_DIR
with Runtime.from_card("moss_tts_local_tiny") as rt:
    result = rt.submit(SpeechRequest(text="Hello.", seed=1, max_frames=6)).result()
assert isinstance(result, SpeechResult) and result.finish_reason in ("stop", "length")
def absent(name):
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return True
    return False
missing = [r for r in metadata.requires("v2")
           if "extra ==" not in r and absent(re.match(r"[A-Za-z0-9_.-]+", r).group())]
typed = resources.files("v2").joinpath("py.typed").is_file()
print(json.dumps({"v2": v2.__file__, "cards": str(CARDS_DIR), "typed": typed, "missing": missing,
                  "frames": int(result.metrics.frames)}))
"""
    done = _run([str(installed["python"]), "-c", script], cwd=installed["work"])
    report = json.loads(done.stdout.strip().splitlines()[-1])
    site = str(installed["purelib"])
    assert report["v2"].startswith(site) and report["cards"].startswith(site), report  # not the checkout
    assert report["typed"] and report["missing"] == [] and report["frames"] >= 1
