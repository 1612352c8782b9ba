#!/usr/bin/env bash
# Set up (if needed) and run the main job on the embedded default card.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m v2 synth "$@"
