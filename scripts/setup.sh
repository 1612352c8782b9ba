#!/usr/bin/env bash
# Create .venv with the CPU build of torch (pinned: an unpinned torch pulls a multi-GB CUDA build) and install
# v2 for one profile:
#   synth (the default): torch + v2 and its runtime dependencies (`pip install -e .`), what synthesis needs;
#   test: synth, plus Triton (its interpreter runs the GPU kernels' tests on a CPU), the test extra
#         (`pip install -e ".[test]"`: pytest, hypothesis, the server's and Ray's packages, matplotlib) and, when
#         run as root, Debian's chromium for the playground's browser test.
# Usage: bash scripts/setup.sh [synth|test] [--dry-run]
# Prints nothing on success (the installers' output goes to .venv/setup.log, shown when a step fails). Quick
# when nothing changed: a stamp per profile in .venv holds a hash of what the install depends on
# (pyproject.toml, setup.py, this script, the checkout's path); while it matches, nothing is installed again.
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
key="$({ cat pyproject.toml setup.py scripts/setup.sh; pwd; } | { sha256sum 2>/dev/null || shasum -a 256; })"
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
if [ ! -x .venv/bin/python ]; then
    if [ "$dry" = 1 ]; then echo "python3 -m venv .venv"; else python3 -m venv .venv; fi
fi
[ "$dry" = 1 ] || : >"$log"
step .venv/bin/python -m pip install --upgrade pip
has torch || step .venv/bin/python -m pip install "torch==2.13.0"
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
