"""scripts/setup.sh's two profiles, read through its `--dry-run` (the steps it would run, one a line; nothing is
installed): `synth` installs torch and v2's own dependencies and none of the test extra's packages; `test`
adds them; each profile's stamp keeps a second call silent, and a synth-only venv is upgraded by `test`. torch's
build follows V2_TORCH (auto: CUDA where `nvidia-smi -L` lists a GPU, else CPU) and V2_TORCH_INDEX, and the log
names what was installed and from where. Then scripts/synth.sh runs in the caller's directory. Every run is on a copy of the scripts in a temporary
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


CPU_INDEX = "https://download.pytorch.org/whl/cpu"
FAKE_PIP = """import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_PIP_CALLS"], "a") as f:
    f.write(" ".join(args) + "\\n")
if "--report" in args:
    if "--index-url" not in args and os.environ.get("FAKE_PIP_ONLY_INDEX"):
        sys.exit("ERROR: No matching distribution found for " + args[-1])
    url = args[args.index("--index-url") + 1] if "--index-url" in args else "file:///wheels"
    with open(args[args.index("--report") + 1], "w") as f:
        json.dump({"install": [{"metadata": {"name": "torch"}, "download_info": {"url": url + "/torch.whl"}}]}, f)
"""


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
        # `-m pip` runs a stand-in that records its arguments (FAKE_PIP_CALLS) and installs nothing
        (base / "fake_pip.py").write_text(FAKE_PIP)
        (bin_ / "python").write_text(f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then shift 2; exec "{sys.executable}" '
                                     f'"{base / "fake_pip.py"}" "$@"; fi\n{env} exec "{sys.executable}" "$@"\n')
        (bin_ / "v2").write_text(f'#!/bin/sh\n{env} exec "{sys.executable}" -m v2 "$@"\n')
        for exe in ("python", "v2"):
            (bin_ / exe).chmod(0o755)
    return root


def stamp(root: Path, profile: str) -> None:
    """The stamp a finished `setup.sh <profile>` leaves: the hash of what the install depends on."""
    parts = b"".join((root / p).read_bytes() for p in ("pyproject.toml", "setup.py", "scripts/setup.sh"))
    key = hashlib.sha256(parts + f"{root}\nauto \n".encode()).hexdigest()  # V2_TORCH, V2_TORCH_INDEX unset
    (root / ".venv" / f".v2-setup-{profile}").write_text(key + "\n")


def machine(root: Path, *, gpu: bool = False, **env: str) -> dict[str, str]:
    """The environment of a machine with (`gpu`) or without an NVIDIA GPU: an `nvidia-smi` first on PATH that
    lists one GPU, or fails as it does without a driver; V2_TORCH* only as given."""
    bin_ = root.parent / ("gpu-bin" if gpu else "cpu-bin")
    bin_.mkdir(exist_ok=True)
    smi = "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'" if gpu else "echo 'NVIDIA-SMI has failed'; exit 9"
    (bin_ / "nvidia-smi").write_text(f"#!/bin/sh\n{smi}\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    base = {k: v for k, v in os.environ.items() if not k.startswith("V2_TORCH")}
    return {**base, "PATH": f"{bin_}:{os.environ['PATH']}", "FAKE_PIP_CALLS": str(root.parent / "pip-calls"), **env}


def setup(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(root / "scripts" / "setup.sh"), *args], capture_output=True, text=True,
                          timeout=60, cwd=root.parent, env=env or machine(root))


def plan(root: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    done = setup(root, *args, "--dry-run", env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.splitlines()


def torch_steps(lines: list[str]) -> list[str]:
    return [line for line in lines if "torch" in line]


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group().lower().replace("_", "-")  # type: ignore[union-attr]


def installed_names(lines: list[str]) -> set[str]:
    """The distributions a plan's pip steps name, v2's requirements expanded from pyproject.toml (its own
    dependencies, plus those of the extras the step asks for)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names: set[str] = set()
    for line in (one for line in lines for one in line.split(" || ")):  # a step with its fallback
        if " -m pip install " not in line:
            continue
        for arg in line.split(" -m pip install ", 1)[1].split():
            if arg.startswith("-") or arg.startswith(("http", ".venv/")):  # an option, or an option's value
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
    # the CPU build's pin (never an unpinned torch): pip's configured sources first, PyTorch's CPU index else
    pin = ".venv/bin/python -m pip install --report .venv/torch-install.json torch==2.13.0+cpu"
    assert torch_steps(synth) == [f"{pin} || {pin} --index-url {CPU_INDEX}"], synth
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
    done = setup(root, "synth")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")  # the real call: nothing to do, silent
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# changed\n")
    assert plan(root, "synth") != []  # a change to what the install depends on: installed again


def test_a_gpu_machine_gets_the_cuda_build_and_v2_torch_chooses_either(fresh):
    cuda = ".venv/bin/python -m pip install --report .venv/torch-install.json torch==2.13.0,!=2.13.0+cpu"
    gpu = machine(fresh, gpu=True)
    assert torch_steps(plan(fresh, env=gpu)) == [cuda]  # auto: nvidia-smi lists a GPU; PyPI's Linux wheel is CUDA
    assert torch_steps(plan(fresh, env={**gpu, "V2_TORCH": "cuda"})) == [cuda]
    assert CPU_INDEX in torch_steps(plan(fresh, env={**gpu, "V2_TORCH": "cpu"}))[0]  # asked for: the CPU build
    assert CPU_INDEX in torch_steps(plan(fresh, env=machine(fresh)))[0]  # an nvidia-smi without a driver: CPU
    mirror = "https://mirror.example/whl/cu130"
    assert torch_steps(plan(fresh, env={**gpu, "V2_TORCH_INDEX": mirror})) == [f"{cuda} --index-url {mirror}"]
    done = setup(fresh, env={**gpu, "V2_TORCH": "rocm"})
    assert done.returncode == 2 and "V2_TORCH='rocm': expected auto, cpu or cuda" in done.stderr
    assert not (fresh / ".venv").exists()


def test_the_log_names_the_torch_build_and_where_it_came_from(tmp_path):
    root = checkout(tmp_path.resolve(), venv=True)  # its python is this interpreter's: a CPU torch
    log = root / ".venv" / "setup.log"
    done = setup(root, "synth")  # the venv's CPU torch is kept
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert log.read_text().splitlines()[0] == "setup: torch: the cpu build (V2_TORCH unset: no NVIDIA GPU (nvidia-smi))"
    assert "the CPU build (V2_TORCH unset: no NVIDIA GPU (nvidia-smi)), kept: the venv had it" in log.read_text()
    assert not any("torch" in call for call in (tmp_path / "pip-calls").read_text().splitlines())
    # a different V2_TORCH is a different stamp: the CUDA build asked for replaces the CPU one, and a CPU build
    # installed in its place (here: the stand-in pip installs nothing) fails naming both and the way out
    done = setup(root, "synth", env=machine(root, V2_TORCH="cuda"))
    assert done.returncode == 1 and "cuda torch asked for, the CPU build installed" in done.stderr, done.stderr
    assert "point V2_TORCH_INDEX at an index of the cuda build" in done.stderr
    # a CPU build the configured sources lack comes from PyTorch's CPU index, and the log says so
    env = machine(root, V2_TORCH="cpu", FAKE_PIP_ONLY_INDEX="1", PYTHONPATH=str(tmp_path / "no-torch"))
    (tmp_path / "no-torch" / "torch").mkdir(parents=True)  # an import of torch that is no build: reinstall
    (tmp_path / "no-torch" / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    setup(root, "synth", env=env)  # fails after the install: the stand-in installed no torch
    text = log.read_text()
    assert "torch==2.13.0+cpu is not in pip's configured sources: trying PyTorch's CPU index" in text, text
    calls = [c for c in (tmp_path / "pip-calls").read_text().splitlines() if "torch==" in c]
    assert calls[-2:] == ["install --report .venv/torch-install.json torch==2.13.0+cpu",
                          f"install --report .venv/torch-install.json torch==2.13.0+cpu --index-url {CPU_INDEX}"]


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
