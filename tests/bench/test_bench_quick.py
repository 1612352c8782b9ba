"""`python -m v2.bench --quick` runs on the tiny card and its last line is JSON with every figure."""

from __future__ import annotations

import json
import math

import pytest

from v2.bench.__main__ import main

SCENARIO_FIELDS = {"concurrency", "stream", "requests", "wall_s", "audio_s", "audio_s_per_s", "requests_per_s",
                   "ttfa_p50_s", "ttfa_p99_s", "rtf_p50", "rtf_mean", "mean_ar_batch", "ar_calls", "underruns",
                   "finish_reasons", "codes_match_baseline", "speedup_vs_baseline", "peak_memory_mb"}


def test_quick_bench_prints_a_table_then_one_json_line(capsys):
    assert main(["--quick", "--no-progress", "--requests", "6", "--max-frames", "16"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert any("RTF" in line and "lower is better" in line for line in out)
    report = json.loads(out[-1])
    assert report["card"] == "moss_tts_local_tiny" and report["quick"] is True
    assert {"torch", "git_commit", "platform", "cpus", "device"} <= set(report["machine"])
    assert {"wall_s", "audio_s", "audio_s_per_s", "requests_per_s"} <= set(report["baseline"])
    assert [(s["concurrency"], s["stream"]) for s in report["scenarios"]] == [(1, True), (1, False), (4, True), (4, False)]
    for s in report["scenarios"]:
        assert SCENARIO_FIELDS <= set(s), SCENARIO_FIELDS - set(s)
        assert s["codes_match_baseline"] is True  # batched == alone, against the sequential loop
        assert s["audio_s"] == report["baseline"]["audio_s"] and s["audio_s_per_s"] > 0
        assert math.isfinite(s["ttfa_p50_s"]) and s["ttfa_p50_s"] <= s["ttfa_p99_s"]
    assert [o["rows"] for o in report["engine_overhead"]] == [1, 16, 64]
    assert all(o["us_per_step"] > 0 and o["us_per_row"] > 0 for o in report["engine_overhead"])


def test_frame_step_bench_runs_on_cpu_and_prints_json(capsys):
    from v2.families.moss_tts_local.bench.framestep import main as framestep

    assert framestep(["--buckets", "1", "4", "--iters", "1", "--context", "128"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["dims"] == "tiny" and [b["bucket"] for b in report["buckets"]] == [1, 4]
    assert all(b["eager_ms"] > 0 and b["frames_per_s"] > 0 for b in report["buckets"])
    assert report["decode_attention"] == []  # the kernel comparison runs where the kernel does (CUDA)


def test_decode_attention_comparison_times_both_paths(tiny_model, monkeypatch):
    from v2.families.moss_tts_local.bench.framestep import attention_row
    from v2.models import kernels
    from v2.models.kernels import decode_attention as da

    if da.triton is None:
        pytest.skip("needs triton")
    monkeypatch.setattr(kernels, "FORCE", True)  # the interpreter on CPU: checks the harness, not speed
    row = attention_row(tiny_model, 2, 300, 1)
    assert row["bucket"] == 2 and row["kernel_us"] > 0 and row["sdpa_us"] > 0


def test_launch_count_at_release_dims_routes_every_piece_to_its_kernel(capsys):
    from v2.bench.launches import main as launches
    from v2.models import kernels

    if kernels.triton is None:
        pytest.skip("needs triton")
    assert launches(["--buckets", "1"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["buckets"][0]
    layers = 36
    assert row["triton"] == {"rms_norm": 2 * layers + 1,  # the first norm, then each residual add + the next norm
                             "split": layers,  # decode attention (its last split merges)
                             "qk_rope": layers, "silu_mul": layers,
                             "local_attention": 12,  # one local transformer step per codebook input
                             "add_layer_norm": 24,  # its two residual adds, each with the norm after it
                             "embed_layer_norm": 12,  # each code's row: the next step's input, norm, row sum
                             "sample": 13}  # the stop decision and 12 codebooks
    assert row["kernels_launches"] < row["torch_launches"] / 8
    assert "_to_copy" not in row["kernels_ops"]  # no dtype copy inside the step
