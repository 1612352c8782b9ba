#!/usr/bin/env bash
# Create .venv with the CPU build of torch (pinned: an unpinned torch pulls a multi-GB CUDA build)
# and install v2 with its test extras. Prints nothing on success (the installers' output goes to
# .venv/setup.log, shown when a step fails). Quick when nothing changed: a stamp in .venv holds a hash of
# what the install depends on (pyproject.toml, setup.py, this script, the checkout's path); while it
# matches, nothing is installed again.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.v2-setup-stamp
key="$({ cat pyproject.toml setup.py scripts/setup.sh; pwd; } | { sha256sum 2>/dev/null || shasum -a 256; })"
key="${key%% *}"
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    exit 0
fi
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
log=.venv/setup.log
: >"$log"
step() {
    "$@" >>"$log" 2>&1 || { echo "setup: '$*' failed (the whole output: $log):" >&2; tail -n 30 "$log" >&2; exit 1; }
}
has() { .venv/bin/python -c "import $1" >/dev/null 2>&1; }
step .venv/bin/python -m pip install --upgrade pip
has torch || step .venv/bin/python -m pip install "torch==2.13.0"
# the Triton the GPU machines compile kernels with (the tests run its interpreter on the CPU)
if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
    has triton || step .venv/bin/python -m pip install "triton==3.6.0"
fi
step .venv/bin/python -m pip install -e ".[test]"
# Debian's chromium for the playground page's browser test (tests/server/test_playground.py skips without it)
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
        >>"$log" 2>&1 || echo "setup: chromium could not be installed; the browser test will be skipped" >&2
fi
echo "$key" >"$stamp"
