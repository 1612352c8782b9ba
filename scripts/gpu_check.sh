#!/usr/bin/env bash
# Every GPU test and benchmark in one go, for a lent GPU machine (run from the repository root).
#
# That machine has torch, safetensors, tokenizers and hypothesis but no pydantic or soundfile: fetch their
# wheels here first (the folder .whl/ is ignored by git), then carry .whl in the device call:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl pydantic pydantic-core annotated-types typing-inspection typing-extensions soundfile cffi pycparser
# Output lands in $OUT (or ./out when unset): gpu_tests.log, framestep.json, serving.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out}"
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check.sh needs a CUDA GPU')" || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
status=0
timeout 300 python3 -m pytest -q -m gpu tests/gpu 2>&1 | tee "$OUT/gpu_tests.log" || status=1
timeout 240 python3 -m v2.bench.framestep 2>&1 | tee "$OUT/framestep.log"; tail -n 1 "$OUT/framestep.log" > "$OUT/framestep.json"
timeout 300 python3 -m v2.bench --card moss_tts_local_v1_5 --random-weights --quick --no-progress --concurrency 1 16 64 \
    2>&1 | tee "$OUT/serving.log"; tail -n 1 "$OUT/serving.log" > "$OUT/serving.json"
exit $status
