#!/usr/bin/env bash
# Set up (if needed: the synth profile, what synthesis needs) and run the main job on the embedded default card.
# Runs in the caller's directory: a relative `-o`, `--text-file` or `--reference` means a file there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh" synth
exec "$root/.venv/bin/v2" synth "$@"
