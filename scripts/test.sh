#!/usr/bin/env bash
# Set up (if needed: the test profile, synth's packages plus the test extra) and run the whole CPU test suite;
# GPU tests skip without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec .venv/bin/python -m pytest tests "$@"
