"""`python -m v2.families.moss_tts_local.bench.kv` pieces: the capacity count uses the real pager and meets the
issue's goal at the release dims; the frame-step comparison runs both caches on the same inputs."""

from __future__ import annotations

from v2.families.moss_tts_local.bench.kv import capacity, frame_step


def test_capacity_at_the_release_dims_is_within_five_percent_of_the_rows_used():
    out = capacity(int(100e9), 300, 125, 160, [16, 128])
    assert out["row_bytes"] == 147456 and out["contiguous"] == 110
    block16, block128 = out["paged"]
    assert block16["requests"] >= 1500 and block16["requests"] >= 0.95 * out["ideal"]
    assert block16["pool_bytes"] <= out["budget_bytes"] and block128["requests"] < block16["requests"]
    assert block16["requests_shared_voice"] > block16["requests"]  # the shared voice blocks are held once


def test_the_frame_step_comparison_times_both_caches():
    row = frame_step(4, 256, 1, 1)
    assert row["paged_ms"] > 0 and row["contiguous_ms"] > 0 and row["paged_over_contiguous"] > 0
