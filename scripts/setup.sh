#!/usr/bin/env bash
# Create .venv with the CPU build of torch (pinned: an unpinned torch pulls a multi-GB CUDA build)
# and install v2 with its test extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install --quiet "torch==2.13.0"
# the Triton the GPU machines compile kernels with (the tests run its interpreter on the CPU)
if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
    .venv/bin/python -c "import triton" 2>/dev/null || .venv/bin/python -m pip install --quiet "triton==3.6.0"
fi
.venv/bin/python -m pip install --quiet -e ".[test]"
# Debian's chromium for the playground page's browser test (tests/server/test_playground.py skips without it)
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
        >/dev/null 2>&1 || echo "setup: chromium could not be installed; the browser test will be skipped" >&2
fi
