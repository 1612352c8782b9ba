#!/usr/bin/env bash
# Every GPU test and benchmark in one go, for a lent GPU machine (run from the repository root).
#
# That machine has torch, safetensors, tokenizers and hypothesis but no pydantic or soundfile: fetch their
# wheels here first (the folder .whl/ is ignored by git), then carry .whl in the device call:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl pydantic pydantic-core annotated-types typing-inspection typing-extensions soundfile cffi pycparser
# Output lands in $OUT (or ./out when unset): gpu_tests.log, launches.json, framestep.json, compile.json,
# serving.json, kv.json, engine.json, qwen_gpu_tests.log, qwen_launches.json, qwen_frames.json, qwen_family_tests.log,
# qwen_engine.json, qwenstep_tests.log, qwenstep_launches.json, qwen_framestep_1.7b.json, qwen_framestep_0.6b.json,
# csm_tests.log, csm_launches.json, csm_framestep.json, csm_bench.json, omni_tests.log, omni_launches.json,
# omni_launches_meta.json.
# Parts: scripts/gpu_check.sh [tests] [launches] [framestep] [compile] [serving] [kv] [engine] [qwen] [qwenstep] [csm]
# [omni] (default: all eleven, about 42 minutes at most by their timeouts; a device call runs at most 10, so split
# them over calls when needed). A short first call for the frame step: scripts/gpu_check.sh tests launches framestep
# (~6 minutes); for Qwen3-TTS's fast path: scripts/gpu_check.sh qwenstep (~6 minutes at most); for Qwen3-Omni's MoE
# kernels and launch counts: scripts/gpu_check.sh omni (~7.5 minutes at most).
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
parts="${*:-tests launches framestep compile serving kv engine qwen qwenstep csm omni}"
QWEN_GPU_TESTS="tests/gpu/test_qwen3_tts_gpu.py tests/gpu/test_qwen3_tts_family_gpu.py"
# the qwenstep part's: the fused sampler at 16 groups (in `tests` too), the code predictor's kernels in bf16, graph == eager
QWENSTEP_GPU_TESTS="tests/gpu/test_sample_kernel_gpu.py tests/models/test_frame_kernels.py tests/gpu/test_qwen3_tts_frame_graph_gpu.py"
# the csm part's: the fixture on CUDA, graphs == eager, batched == alone; Mimi's device path
CSM_GPU_TESTS="tests/gpu/test_csm_gpu.py tests/models/mimi/test_device_path.py"
# the omni part's: the MoE block's routing and grouped-expert kernels vs the torch form at the release's widths
OMNI_GPU_TESTS="tests/gpu/test_qwen3_omni_moe_gpu.py"
status=0
for part in $parts; do
    case "$part" in
    tests)  # every GPU test but the Qwen3-TTS, CSM and Qwen3-Omni ones (their parts run those), the kernels' bf16
            # checks against their torch forms among them (qk_rope with and without q/k norms, norm_linear at the CSM
            # depth decoder's widths; the forced aligner's device forms against its CPU forms)
        timeout 200 python3 -m pytest -q -m gpu tests $(printf -- '--ignore=%s ' $QWEN_GPU_TESTS $CSM_GPU_TESTS \
            $OMNI_GPU_TESTS tests/gpu/test_qwen3_tts_frame_graph_gpu.py) 2>&1 \
            | tee "$OUT/gpu_tests.log" || status=1 ;;
    launches)  # kernels per frame step at the release's dims (meta device), by kind: the graph's node count
        timeout 60 python3 -m v2.bench.launches --buckets 1 64 2>&1 | tee "$OUT/launches.log"
        tail -n 1 "$OUT/launches.log" > "$OUT/launches.json" ;;
    framestep)  # the frame step (local attention, fused norms, one-launch decode attention): eager vs graph per
                # bucket at the release's dims, and the decode attention kernel vs gather + SDPA
        timeout 150 python3 -m v2.families.moss_tts_local.bench.framestep --no-compile 2>&1 | tee "$OUT/framestep.log"
        tail -n 1 "$OUT/framestep.log" > "$OUT/framestep.json" ;;
    compile)  # the torch.compile(mode="reduce-overhead") baseline recompiles per bucket: three buckets only
        timeout 150 python3 -m v2.families.moss_tts_local.bench.framestep --buckets 1 16 64 --iters 10 2>&1 | tee "$OUT/compile.log"
        tail -n 1 "$OUT/compile.log" > "$OUT/compile.json" ;;
    serving)
        timeout 240 python3 -m v2.bench --card moss_tts_local_v1_5 --random-weights --quick --no-progress \
            --concurrency 1 16 64 2>&1 | tee "$OUT/serving.log"
        tail -n 1 "$OUT/serving.log" > "$OUT/serving.json" ;;
    kv)  # paged KV: the decode kernel over pages vs a contiguous slot (batch 1 and 64), the frame step at 256 rows
        timeout 120 python3 -m v2.families.moss_tts_local.bench.kv --skip-ttfa --rounds 5 2>&1 | tee "$OUT/kv.log"
        tail -n 1 "$OUT/kv.log" > "$OUT/kv.json"
        timeout 120 python3 -m v2.families.moss_tts_local.bench.framestep --no-compile --buckets 64 256 2>&1 | tee "$OUT/framestep256.log"
        tail -n 1 "$OUT/framestep256.log" > "$OUT/framestep256.json" ;;
    engine)  # the overlapped step on CUDA: engine host time per row, serving vs generate_batch per frame
        timeout 150 python3 -m v2.bench.engine --device cuda --quick 2>&1 | tee "$OUT/engine.log"
        tail -n 1 "$OUT/engine.log" > "$OUT/engine.json" ;;
    qwen)  # Qwen3-TTS 12 Hz: the model layer on CUDA (fp32 fixture parity, batched == alone, the RL recompute),
           # its frame step's launches at the release's dims and its frames per second on the tiny fixture; once
           # the family package and its tiny card are there, graph == eager on a runtime, the family's tests, and
           # the engine bench on that card (else those are skipped, and say so)
        timeout 240 python3 -m pytest -q -m gpu $QWEN_GPU_TESTS 2>&1 | tee "$OUT/qwen_gpu_tests.log" || status=1
        timeout 60 python3 -m v2.bench.launches --family qwen3_tts --size 1.7b --buckets 1 64 2>"$OUT/qwen_launches.log" \
            | tail -n 1 > "$OUT/qwen_launches.json"
        timeout 90 python3 -m v2.families.qwen3_tts.bench.frames --device cuda --batches 1 8 64 2>&1 | tee "$OUT/qwen_frames.log"
        tail -n 1 "$OUT/qwen_frames.log" > "$OUT/qwen_frames.json"
        if [ -f v2/families/qwen3_tts/__init__.py ] \
                && python3 -c "import sys; from v2.card import known_cards; sys.exit('qwen3_tts_tiny' not in known_cards())"; then
            if [ -d tests/families/qwen3_tts ]; then
                timeout 240 python3 -m pytest -q tests/families/qwen3_tts 2>&1 | tee "$OUT/qwen_family_tests.log" || status=1
            fi
            timeout 150 python3 -m v2.bench.engine --card qwen3_tts_tiny --device cuda --quick 2>&1 | tee "$OUT/qwen_engine.log" \
                || status=1
            tail -n 1 "$OUT/qwen_engine.log" > "$OUT/qwen_engine.json"
        else
            echo "qwen: no v2/families/qwen3_tts package or qwen3_tts_tiny card yet: the family's tests and bench skipped" \
                | tee "$OUT/qwen_family_skipped.txt"
        fi ;;
    qwenstep)  # Qwen3-TTS's frame step on the fast path: the fused sampler's bits for G = 16 against the torch path,
               # the code predictor's kernels (frame attention, gate/up + SwiGLU) in bf16 at the release's layout,
               # graph == eager for the talker executor's frame step (fp32 and bf16, every bucket, state carried),
               # the launch counts (both sizes, buckets 1/16/64: <= 900), and the frame step's milliseconds per
               # bucket 1/16/64 at both release sizes (random weights, bf16), eager and replayed, with graph == eager
        timeout 200 python3 -m pytest -q -m gpu $QWENSTEP_GPU_TESTS 2>&1 | tee "$OUT/qwenstep_tests.log" || status=1
        timeout 90 python3 -m v2.bench.launches --family qwen3_tts --buckets 1 16 64 2>"$OUT/qwenstep_launches.log" \
            | tail -n 1 > "$OUT/qwenstep_launches.json"
        for size in 1.7b 0.6b; do
            timeout 120 python3 -m v2.families.qwen3_tts.bench.framestep --size "$size" --buckets 1 16 64 2>&1 \
                | tee "$OUT/qwen_framestep_$size.log"
            tail -n 1 "$OUT/qwen_framestep_$size.log" > "$OUT/qwen_framestep_$size.json"
            grep -q '"graph_equals_eager": false' "$OUT/qwen_framestep_$size.json" && status=1
        done ;;
    csm)  # Sesame CSM-1B: the tiny fixture through the runtime on CUDA (greedy codes), graphs == eager, batched ==
          # alone, Mimi's device path; launches per frame step at the release's dims; the frame step's milliseconds
          # per bucket 1/16/64 at the release's dims (random weights, bf16), eager and replayed, with graph == eager;
          # the serving bench on csm_tiny
        timeout 240 python3 -m pytest -q -m gpu $CSM_GPU_TESTS 2>&1 | tee "$OUT/csm_tests.log" || status=1
        timeout 90 python3 -m v2.bench.launches --family csm --buckets 1 16 64 2>"$OUT/csm_launches.log" \
            | tail -n 1 > "$OUT/csm_launches.json"
        timeout 150 python3 -m v2.families.csm.bench.framestep --buckets 1 16 64 2>&1 | tee "$OUT/csm_framestep.log"
        tail -n 1 "$OUT/csm_framestep.log" > "$OUT/csm_framestep.json"
        grep -q '"graph_equals_eager": false' "$OUT/csm_framestep.json" && status=1
        timeout 150 python3 -m v2.bench --card csm_tiny --device cuda --quick 2>&1 | tee "$OUT/csm_bench.log" || status=1
        tail -n 1 "$OUT/csm_bench.log" > "$OUT/csm_bench.json" ;;
    omni)  # Qwen3-Omni's MoE block on CUDA: the routing kernel and the grouped-expert kernels against the torch form in
           # bf16 (within 0.02 + 0.02 |x|, and as close to float32 as torch's bf16) and fp32 (1e-5) at the thinker's and
           # the talker's release widths, the block with the shared expert, batched == alone bit for bit; then kernel
           # launches per thinker token step and per talker frame step at the release's dims (aims: <= 400, <= 900):
           # the real count (torch.profiler, random bf16 weights, stacks of 1 and 2 layers scaled to 48 / 20) and the
           # dispatch count on the meta device
        timeout 240 python3 -m pytest -q -m gpu $OMNI_GPU_TESTS 2>&1 | tee "$OUT/omni_tests.log" || status=1
        timeout 150 python3 -m v2.models.qwen3_omni.launches --device cuda --buckets 1 16 2>"$OUT/omni_launches.log" \
            | tail -n 1 > "$OUT/omni_launches.json"
        timeout 60 python3 -m v2.models.qwen3_omni.launches --buckets 1 16 2>>"$OUT/omni_launches.log" \
            | tail -n 1 > "$OUT/omni_launches_meta.json" ;;
    *) echo "unknown part: $part (tests, launches, framestep, compile, serving, kv, engine, qwen, qwenstep, csm, omni)"; exit 2 ;;
    esac
done
exit $status
