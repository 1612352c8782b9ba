"""The soak in its CI size: 100 requests with random lengths, cancels and slow readers; nothing leaks."""

from __future__ import annotations

import json

from v2.bench.soak import main


def test_soak_100_requests(capsys):
    assert main(["--requests", "100", "--concurrency", "24"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["ended"] == 100 and report["ended_twice"] == 0 and report["errors"] == 0
    assert report["leaked_kv_slots"] == report["leaked_codec_slots"] == report["left_waiting"] == 0
    assert report["leaked_kv_blocks"] == 0
    assert report["engine_alive"] and report["finish_reasons"].get("abort", 0) > 0
    assert set(report["rss_mb"]) == {"start", "middle", "end"}
