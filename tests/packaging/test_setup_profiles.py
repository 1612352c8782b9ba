"""scripts/setup.sh's two profiles, read through its `--dry-run` (the steps it would run, one a line; nothing is
installed): `synth` installs torch and v2's own dependencies and none of the test extra's packages; `test`
adds them; each profile's stamp keeps a second call silent, and a synth-only venv is upgraded by `test`. Then
scripts/synth.sh runs in the caller's directory. Every run is on a copy of the scripts in a temporary
checkout, whose `.venv/bin/python` hands over to this interpreter (which has torch), so nothing is fetched."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def checkout(base: Path, *, venv: bool) -> Path:
    """A copy of what setup.sh reads (pyproject.toml, setup.py, scripts/), with a `.venv/bin/python` (and
    `v2`) that run this interpreter on the real checkout's v2 when `venv`."""
    root = base / "checkout"
    (root / "scripts").mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py"):
        shutil.copy2(ROOT / name, root / name)
    for script in (ROOT / "scripts").glob("*.sh"):
        shutil.copy2(script, root / "scripts" / script.name)
    if venv:
        bin_ = root / ".venv" / "bin"
        bin_.mkdir(parents=True)
        env = f'PYTHONPATH="{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}"'
        (bin_ / "python").write_text(f'#!/bin/sh\n{env} exec "{sys.executable}" "$@"\n')
        (bin_ / "v2").write_text(f'#!/bin/sh\n{env} exec "{sys.executable}" -m v2 "$@"\n')
        for exe in ("python", "v2"):
            (bin_ / exe).chmod(0o755)
    return root


def stamp(root: Path, profile: str) -> None:
    """The stamp a finished `setup.sh <profile>` leaves: the hash of what the install depends on."""
    parts = b"".join((root / p).read_bytes() for p in ("pyproject.toml", "setup.py", "scripts/setup.sh"))
    key = hashlib.sha256(parts + f"{root}\n".encode()).hexdigest()
    (root / ".venv" / f".v2-setup-{profile}").write_text(key + "\n")


def plan(root: Path, *args: str) -> list[str]:
    done = subprocess.run(["bash", str(root / "scripts" / "setup.sh"), *args, "--dry-run"], capture_output=True,
                          text=True, timeout=60, cwd=root.parent)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.splitlines()


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group().lower().replace("_", "-")  # type: ignore[union-attr]


def installed_names(lines: list[str]) -> set[str]:
    """The distributions a plan's pip steps name, v2's requirements expanded from pyproject.toml (its own
    dependencies, plus those of the extras the step asks for)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names: set[str] = set()
    for line in lines:
        if " -m pip install " not in line:
            continue
        for arg in line.split(" -m pip install ", 1)[1].split():
            if arg.startswith("-"):
                continue
            if arg == "." or arg.startswith(".["):
                extras = re.findall(r"[\w-]+", arg[2:-1]) if arg.startswith(".[") else []
                reqs = project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]
                names |= {"v2", *map(_name, reqs)}
            else:
                names.add(_name(arg))
    return names


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    return checkout(tmp_path.resolve(), venv=False)


def test_the_synth_profile_installs_what_synthesis_needs_and_no_test_package(fresh):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    test_only = {_name(r) for r in project["optional-dependencies"]["test"]} - runtime
    assert {"pytest", "hypothesis", "triton", "ray", "openai", "matplotlib"} <= test_only

    synth = plan(fresh, "synth")
    assert synth[0] == "python3 -m venv .venv"
    assert installed_names(synth) == runtime | {"pip", "v2"}, synth
    assert any(line.endswith("install torch==2.13.0") for line in synth)  # the CPU pin, never an unpinned torch
    assert not any("apt-get" in line or "chromium" in line for line in synth)
    assert plan(fresh) == synth  # synth is the default


def test_the_test_profile_installs_the_test_extra_too(fresh):
    names = installed_names(plan(fresh, "test"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {_name(r) for r in project["optional-dependencies"]["test"]} | {"torch", "v2"} <= names


def test_each_profile_is_quiet_once_done_and_test_upgrades_a_synth_venv(tmp_path):
    root = checkout(tmp_path.resolve(), venv=True)
    first = plan(root, "synth")  # a venv with torch already: v2 only
    assert not any("torch" in line or "-m venv" in line for line in first) and first[-1].endswith("install -e .")
    stamp(root, "synth")
    assert plan(root, "synth") == []
    upgrade = plan(root, "test")  # the synth stamp does not stand for test: the rest is added, torch kept
    assert any(line.endswith('install -e .[test]') for line in upgrade)
    assert not any("torch" in line or "-m venv" in line for line in upgrade)
    stamp(root, "test")
    (root / ".venv" / ".v2-setup-synth").unlink()
    assert plan(root, "test") == [] and plan(root, "synth") == []  # a test venv has everything synth needs
    done = subprocess.run(["bash", str(root / "scripts" / "setup.sh"), "synth"], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")  # the real call: nothing to do, silent
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# changed\n")
    assert plan(root, "synth") != []  # a change to what the install depends on: installed again


def test_an_unknown_profile_is_refused(fresh):
    done = subprocess.run(["bash", str(fresh / "scripts" / "setup.sh"), "everything"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "unknown argument 'everything'" in done.stderr
    assert not (fresh / ".venv").exists()


def test_synth_sh_writes_a_relative_out_in_the_callers_directory(tmp_path):
    root = checkout(tmp_path.resolve(), venv=True)
    stamp(root, "synth")
    caller = tmp_path.resolve() / "caller"
    caller.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(["bash", str(root / "scripts" / "synth.sh"), "Hi.", "-o", "speech/hi.wav", "--mkdir", "-q",
                           "--max-frames", "4", "--seed", "1"], cwd=caller, env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["out"] == str(caller / "speech" / "hi.wav")  # absolute, in the caller's directory
    assert (caller / "speech" / "hi.wav").stat().st_size > 44 and not (root / "speech").exists()
