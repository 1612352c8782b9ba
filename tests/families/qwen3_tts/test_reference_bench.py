"""Qwen3-TTS's comparison with its reference's `generate` (v2/families/qwen3_tts/bench/reference.py): its smallest
setting end to end where the reference's python has the qwen_tts package (`$V2_QWEN3_TTS_REFERENCE_PYTHON`, else
this one), and what runs without it: the one-line skip, the shared command's skip, the prompts and settings, the
worker's forced budget."""

from __future__ import annotations

import importlib.util
import json
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from v2.bench import reference as command
from v2.families.qwen3_tts.bench import reference as bench
from v2.families.qwen3_tts.bench import reference_setup as setup

from .conftest import CHECKPOINT


def _worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("qwen3_tts_reference_worker", setup.WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python_without_site(tmp_path: Path) -> str:
    """A python that sees no installed package (`-S`): qwen_tts is never importable by it."""
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.mark.skipif(bool(bench.qwen_tts_missing(bench.reference_python())),
                    reason="qwen_tts is not importable by the reference's python ($V2_QWEN3_TTS_REFERENCE_PYTHON)")
def test_the_smallest_setting_runs_against_the_reference_with_greedy_codes_equal() -> None:
    logged: list[str] = []
    report = bench.compare(CHECKPOINT, bench.reference_python(), frames=2, batch=2, repeat=1, log=logged.append,
                           modes=("greedy",), count_ops=False)
    assert report["reference_fixture_codes_equal"] == {"cv": True}
    assert len(report["codes"]) == 5 and all(report["codes"].values()), report["codes"]
    sides = {r["side"]: r for r in report["sides"]}
    assert set(sides) == {f"greedy/{s}" for s in ("reference_1", "generate_1", "runtime_1", "reference_2",
                                                   "generate_2", "runtime_2")}
    for name, row in sides.items():
        assert row["ms_per_row_frame_median"] > 0 and row["frames"] == 2
        assert ("x_reference_median" in row) == ("reference_" not in name)
    assert set(report["goals"]) == {"greedy/generate_1", "greedy/runtime_1", "greedy/runtime_2"}
    assert report["ops_per_frame_step"] is None
    assert len(logged) == 1 and "repetition 1/1" in logged[0]
    json.dumps(report)  # the command's JSON line


def test_without_qwen_tts_the_command_skips_with_one_line(tmp_path, capsys):
    python = _python_without_site(tmp_path)
    assert bench.main(["--reference-python", python]) == 0
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and err.strip().endswith(": skipped")
    assert "the qwen_tts package is not importable by " + python in err and bench.PYTHON_ENV in err
    assert "No module named " in err
    line = json.loads(out.strip().splitlines()[-1])
    assert line == {"bench": "v2.reference", "family": "qwen3_tts", "skipped": err.strip()}


def test_the_shared_command_locates_the_checkpoint_and_skips_saying_why(tmp_path, monkeypatch):
    monkeypatch.delenv(bench.ENV, raising=False)
    monkeypatch.setenv(bench.PYTHON_ENV, _python_without_site(tmp_path))
    path, _, why = command.locate("qwen3_tts", None, None)
    assert path is None and bench.ENV in why
    path, _, why = command.locate("qwen3_tts", str(tmp_path), None)
    assert path is None and why == f"{tmp_path} has no config.json (a Qwen3-TTS checkpoint in the release " \
                                   f"layout, e.g. {setup.CHECKPOINT}): skipped"
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "csm"}))
    assert bench.not_a_checkpoint(tmp_path) == f"{tmp_path / 'config.json'}: model_type is not 'qwen3_tts'"
    monkeypatch.setenv(bench.ENV, str(CHECKPOINT))
    path, _, why = command.locate("qwen3_tts", None, None)
    assert path is None and "the qwen_tts package is not importable" in why and why.endswith(": skipped")
    missing = str(tmp_path / "no_python")
    assert bench.qwen_tts_missing(missing).startswith(f"{missing}: ")


def test_prompts_settings_and_requests() -> None:
    asks = setup.prompts(8)
    assert [a["speaker"] for a in asks] == ["Vivian", "Ryan", "Serena", "Aiden"] * 2
    assert asks[6]["ids"] == asks[0]["ids"] and asks[1]["ids"] != asks[0]["ids"]
    assert all(a["ids"][:3] == [151644, 77091, 198] and a["ids"][-5:] == [151645, 198, 151644, 77091, 198]
               for a in asks)
    sampling, penalty = setup.settings(CHECKPOINT)
    assert penalty == 1.05 and sampling == {"temperature": 0.9, "top_k": 50, "top_p": 1.0,
                                            "subtalker_temperature": 0.9, "subtalker_top_k": 50,
                                            "subtalker_top_p": 1.0}
    req = bench._request(asks[0], 3, 5, None, penalty)
    assert req["text_ids"] == asks[0]["ids"][3:-5] and req["max_frames"] == req["min_frames"] == 5
    assert req["temperature"] == 0.0 and req["seed"] == 3 and req["text_feed"] == "whole"
    card = setup.fixture_card(16, 64).model_dump(by_alias=True)
    assert card["loops"]["talker"]["max_running"] == 16 and card["runtime"]["cpu_threads"] == 1


def test_the_workers_modes_and_forced_budget() -> None:
    worker = _worker()
    greedy, sampled = worker.modes({"temperature": 0.7}, 1.05).values()
    assert greedy == {"do_sample": False, "subtalker_dosample": False, "repetition_penalty": 1.05}
    assert sampled["do_sample"] and sampled["temperature"] == 0.7 and sampled["repetition_penalty"] == 1.05
    seen: list[dict[str, Any]] = []

    class Talker:
        def generate(self, **kwargs: Any) -> None:
            seen.append(kwargs)

    class Model:
        talker = Talker()

    model = Model()
    worker.force_budget(model)
    model.talker.generate(max_new_tokens=9, min_new_tokens=2)
    assert seen == [{"max_new_tokens": 9, "min_new_tokens": 9}]
