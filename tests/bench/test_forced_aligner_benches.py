"""`python -m v2.models.forced_aligner.launches` and `.bench`: valid JSON at tiny settings (the tiny card's dims)."""

from __future__ import annotations

import json

from v2.models.forced_aligner.bench import main as bench
from v2.models.forced_aligner.launches import main as launches
from v2.models.forced_aligner.launches import release_config


def test_launch_count_splits_the_parts_and_scales_the_layers(capsys):
    assert launches(["--dims", "tiny", "--seconds", "1", "--batch", "1", "2"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["dims"].startswith("tiny") and [(r["seconds"], r["batch"]) for r in report["rows"]] == [(1.0, 1), (1.0, 2)]
    for row in report["rows"]:
        for way in ("device", "cpu"):
            parts = row[way]["parts"]
            assert set(parts) == {"features", "encoder", "decoder"}
            assert row[way]["launches"] == sum(p["launches"] for p in parts.values())
            assert parts["encoder"]["per_layer"] > 0 and parts["decoder"]["per_layer"] > 0
            assert parts["features"]["per_layer"] == 0
        assert row["device"]["launches"] < row["cpu"]["launches"]  # the exact CPU forms are many small calls
    one, two = report["rows"]
    assert two["device"]["parts"]["features"]["launches"] == 2 * one["device"]["parts"]["features"]["launches"]


def test_release_config_parses_at_the_release_sizes():
    from v2.models.forced_aligner.config import ForcedAlignerConfig

    cfg = ForcedAlignerConfig.from_dict(release_config())
    assert (cfg.audio.d_model, cfg.audio.num_layers, cfg.text.hidden_size, cfg.text.num_layers) == (1024, 24, 1024, 28)
    assert (cfg.classes, cfg.segment_ms, cfg.text.vocab_size) == (5000, 80, 152064)


def test_time_per_audio_second_by_part(capsys):
    assert bench(["--dims", "tiny", "--seconds", "1", "--repeat", "1"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (row,) = report["rows"]
    assert report["dims"] == "tiny" and row["seconds"] == 1.0 and row["tokens_per_clip"] > 0
    assert set(row["parts_wall_s_per_audio_s"]) == {"resample", "features", "encoder", "decoder"}
    assert row["wall_s_per_audio_s"] > 0 and row["cpu_s_per_audio_s"] >= 0
