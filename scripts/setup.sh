#!/usr/bin/env bash
# Create .venv with torch 2.13.0 of the build this machine wants and install v2 for one profile:
#   synth (the default): torch + v2 and its runtime dependencies (`pip install -e .`), what synthesis needs;
#   test: synth, plus Triton (its interpreter runs the GPU kernels' tests on a CPU), the test extra
#         (`pip install -e ".[test]"`: pytest, hypothesis, the server's and Ray's packages, matplotlib) and, when
#         run as root, Debian's chromium for the playground's browser test.
# Usage: bash scripts/setup.sh [synth|test] [--dry-run]
# Which torch (pinned: an unpinned torch on Linux resolves to PyPI's CUDA build, several GB):
#   V2_TORCH=auto (the default): the CUDA build when `nvidia-smi -L` lists a GPU, else the CPU build;
#   V2_TORCH=cpu | cuda: that build whatever the machine has;
#   V2_TORCH_INDEX=URL: the pip index to take it from (a mirror, or another CUDA build of PyTorch's, with
#   V2_TORCH=cuda). Unset, the CPU build (torch==2.13.0+cpu) comes from pip's own configured sources when they
#   have it, else from PyTorch's CPU index (https://download.pytorch.org/whl/cpu); the CUDA build from pip's
#   configured index (PyPI: its Linux wheels are the CUDA build). A venv's torch of the other build is replaced.
#   .venv/setup.log's first line is the choice; a line after torch's install names the version and where
#   pip took it from (or that the venv already had it).
# Prints nothing on success (the installers' output goes to .venv/setup.log, shown when a step fails). Quick
# when nothing changed: a stamp per profile in .venv holds a hash of what the install depends on
# (pyproject.toml, setup.py, this script, the checkout's path, V2_TORCH and V2_TORCH_INDEX); while it matches,
# nothing is installed again.
# The test profile's stamp also stands for synth (test installs everything synth does), so `scripts/synth.sh`
# after `scripts/test.sh` installs nothing, and `scripts/test.sh` after `scripts/synth.sh` adds the test part.
# --dry-run: print the steps this call would run, one a line, and change nothing (nothing when up to date).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=synth dry=0
for arg in "$@"; do
    case "$arg" in
    synth | test) profile="$arg" ;;
    --dry-run) dry=1 ;;
    *) echo "setup: unknown argument '$arg' (usage: scripts/setup.sh [synth|test] [--dry-run])" >&2; exit 2 ;;
    esac
done
key="$({ cat pyproject.toml setup.py scripts/setup.sh; pwd; echo "${V2_TORCH:-auto} ${V2_TORCH_INDEX:-}"; } | { sha256sum 2>/dev/null || shasum -a 256; })"
key="${key%% *}"
current() { [ -x .venv/bin/python ] && [ -f ".venv/.v2-setup-$1" ] && [ "$(cat ".venv/.v2-setup-$1")" = "$key" ]; }
if current test || { [ "$profile" = synth ] && current synth; }; then
    exit 0
fi
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
log=.venv/setup.log
step() {
    if [ "$dry" = 1 ]; then
        echo "$*"
        return 0
    fi
    "$@" >>"$log" 2>&1 || { echo "setup: '$*' failed (the whole output: $log):" >&2; tail -n 30 "$log" >&2; exit 1; }
}
has() { [ -x .venv/bin/python ] && .venv/bin/python -c "import $1" >/dev/null 2>&1; }
gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }
build="${V2_TORCH:-auto}" why="V2_TORCH=${V2_TORCH:-auto}"
case "$build" in
auto) if gpu; then build=cuda why="V2_TORCH unset: nvidia-smi lists a GPU"; else build=cpu why="V2_TORCH unset: no NVIDIA GPU (nvidia-smi)"; fi ;;
cpu | cuda) ;;
*) echo "setup: V2_TORCH='$build': expected auto, cpu or cuda" >&2; exit 2 ;;
esac
if [ "$build" = cpu ]; then
    spec="torch==2.13.0+cpu"  # the local label: only the CPU build answers (PyPI has none)
    [ "$(uname -s)" = Darwin ] && spec="torch==2.13.0"  # macOS wheels are the CPU build, without the label
elif [ "$(uname -s)" = Darwin ]; then
    echo "setup: V2_TORCH=cuda: PyTorch builds no CUDA torch for macOS" >&2; exit 2
else
    spec="torch==2.13.0,!=2.13.0+cpu"  # any CUDA build of 2.13.0 (PyPI's plain version, or a +cuXYZ)
fi
report=.venv/torch-install.json
pip_torch=(.venv/bin/python -m pip install --report "$report" "$spec")
torch_build() { .venv/bin/python -c "import torch; print('cuda' if torch.version.cuda else 'cpu')" 2>/dev/null; }
# the chosen build, first in the log; the version pip installed and where from (its --report), or the kept one
say_torch() {
    .venv/bin/python - "$report" "$build" "$why" "$1" >>"$log" 2>&1 <<'PY'
import json, os, sys
import torch
report, build, why, action = sys.argv[1:]
got = "cuda" if torch.version.cuda else "cpu"
name = f"the CUDA {torch.version.cuda} build" if torch.version.cuda else "the CPU build"
where = "kept: the venv had it"
if action == "installed" and os.path.exists(report):
    where = next((f"from {i['download_info']['url']}" for i in json.load(open(report))["install"]
                  if i["metadata"]["name"] == "torch"), "installed")
print(f"setup: torch {torch.__version__}, {name} ({why}), {where}")
if got != build:
    sys.exit(f"setup: {build} torch asked for, {name} installed: point V2_TORCH_INDEX at an index of the {build} "
             "build (PyTorch's: https://download.pytorch.org/whl/cpu, https://download.pytorch.org/whl/cu130)")
PY
}
install_torch() {
    if [ "$(torch_build)" = "$build" ]; then
        [ "$dry" = 1 ] || say_torch kept || { tail -n 3 "$log" >&2; exit 1; }
        return 0
    fi
    if [ -n "${V2_TORCH_INDEX:-}" ]; then
        step "${pip_torch[@]}" --index-url "$V2_TORCH_INDEX"
    elif [ "$build" = cpu ]; then
        # pip's configured sources first (a local wheel store answers offline), else PyTorch's CPU index
        if [ "$dry" = 1 ]; then
            echo "${pip_torch[*]} || ${pip_torch[*]} --index-url https://download.pytorch.org/whl/cpu"
        elif ! "${pip_torch[@]}" >>"$log" 2>&1; then
            echo "setup: $spec is not in pip's configured sources: trying PyTorch's CPU index" >>"$log"
            step "${pip_torch[@]}" --index-url https://download.pytorch.org/whl/cpu
        fi
    else
        step "${pip_torch[@]}"
    fi
    [ "$dry" = 1 ] || say_torch installed || { tail -n 3 "$log" >&2; exit 1; }
}
if [ ! -x .venv/bin/python ]; then
    if [ "$dry" = 1 ]; then echo "python3 -m venv .venv"; else python3 -m venv .venv; fi
fi
[ "$dry" = 1 ] || echo "setup: torch: the $build build ($why)" >"$log"
step .venv/bin/python -m pip install --upgrade pip
install_torch
if [ "$profile" = synth ]; then
    step .venv/bin/python -m pip install -e .
else
    # the Triton the GPU machines compile kernels with (the tests run its interpreter on the CPU)
    if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
        has triton || step .venv/bin/python -m pip install "triton==3.6.0"
    fi
    step .venv/bin/python -m pip install -e ".[test]"
    # Debian's chromium for the playground page's browser test (tests/server/test_playground.py skips without it)
    if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        if [ "$dry" = 1 ]; then
            echo "apt-get install -y -qq chromium"
        else
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
                >>"$log" 2>&1 || echo "setup: chromium could not be installed; the browser test will be skipped" >&2
        fi
    fi
fi
[ "$dry" = 1 ] || echo "$key" >".venv/.v2-setup-$profile"
