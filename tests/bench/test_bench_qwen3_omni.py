"""Qwen3-Omni's benches on a tiny setting: the comparison with transformers' generate(return_audio=True) prints
one JSON line whose outputs are equal (skipped only when $V2_QWEN3_OMNI_REFERENCE_PYTHON is not set), the time
to first audio bench prints one JSON line per its schema; the reference's checkpoint copy and the capped-reply
rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from v2.families.qwen3_omni.bench import reference
from v2.families.qwen3_omni.bench.reference_setup import CHECKPOINT, for_reference

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None) -> dict:
    done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.environ.get(reference.PYTHON_ENV), reason=f"${reference.PYTHON_ENV} is not set")
def test_the_reference_comparison_runs_and_its_outputs_are_equal():
    report = run("v2.bench.reference", "--family", "qwen3_omni", "--batch", "2", "--frames", "3", "--repeat", "1")
    assert report["bench"] == "v2.reference" and report["family"] == "qwen3_omni" and "skipped" not in report
    assert report["codes"] == {"greedy_runtime_1_equals_reference_1": True, "greedy_runtime_2_equals_reference_2": True}
    assert all(report["reference_fixture_codes_equal"].values())
    assert [s["side"] for s in report["sides"]] == ["reference_1", "runtime_1", "reference_2", "runtime_2"]
    assert set(report["goals"]) == {"runtime_1", "runtime_2"}


def test_without_the_reference_python_the_comparison_skips_saying_why(tmp_path):
    report = run("v2.families.qwen3_omni.bench", "reference", "--reference-python", str(tmp_path / "none"))
    assert report["family"] == "qwen3_omni" and "skipped" in report["skipped"]


def test_time_to_first_audio_prints_one_json_line():
    report = run("v2.families.qwen3_omni.bench", "ttfa", "--tokens", "6", "--min-tokens", "6", "--frames", "8",
                 "--concurrency", "1", "2")
    assert report["bench"] == "v2.qwen3_omni.ttfa" and [lv["concurrency"] for lv in report["levels"]] == [1, 2]
    for lv in report["levels"]:
        assert len(lv["requests"]) == lv["concurrency"]
        for r in lv["requests"]:
            assert r["text_tokens"] == 6 and r["frames"] == 8 and r["first_audio_s"] is not None
            assert r["thinker_end_s"] is not None and isinstance(r["first_audio_before_thinker_end"], bool)
    assert report["replies_long_enough"] is True


def test_the_reference_copy_spells_the_talker_experts_as_transformers_5_0_reads_them(tmp_path):
    ck = for_reference(CHECKPOINT, tmp_path / "ck")
    text = json.loads((ck / "config.json").read_text())["talker_config"]["text_config"]
    assert text["num_experts"] == text["num_local_experts"] == 8
    assert text["rope_parameters"]["mrope_interleaved"] is True
    assert (ck / "model.safetensors").resolve() == (CHECKPOINT / "model.safetensors").resolve()
    original = json.loads((CHECKPOINT / "config.json").read_text())["talker_config"]["text_config"]
    assert "num_experts" not in original  # the fixture itself is left as it is


def test_a_capped_reference_reply_is_compared_without_its_unspoken_last_token():
    assert reference.spoken([5, 6, 7], 2) == [5, 6]
    assert reference.spoken([5, reference.EOS], 2) == [5]
    assert reference.spoken([5, 6, reference.EOS], 2) == [5, 6]
