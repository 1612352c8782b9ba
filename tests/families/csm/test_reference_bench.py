"""CSM's comparison with transformers' `generate` (v2/families/csm/bench/reference.py): its smallest setting end
to end where the reference's python has transformers (`$V2_CSM_REFERENCE_PYTHON`, else this one), and what runs
without it: the one-line skip, the stop-free checkpoint copy, the prompts, the worker's padding and frame count."""

from __future__ import annotations

import importlib.util
import json
import stat
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from v2.bench import reference as command
from v2.families.csm.bench import reference as bench
from v2.families.csm.bench import reference_setup as setup

from .conftest import CHECKPOINT


def _worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("csm_reference_worker", setup.WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python_without_site(tmp_path: Path) -> str:
    """A python that sees no installed package (`-S`): transformers is never importable by it."""
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.mark.skipif(bool(bench.transformers_missing(bench.reference_python())),
                    reason="transformers is not importable by the reference's python ($V2_CSM_REFERENCE_PYTHON)")
def test_the_smallest_setting_runs_against_transformers_with_greedy_codes_equal():
    logged: list[str] = []
    report = bench.compare(CHECKPOINT, bench.reference_python(), frames=2, batch=2, repeat=1, log=logged.append,
                           modes=("greedy",), count_ops=False)
    assert report["reference_fixture_codes_equal"] == {"s0": True, "s1": True, "ctx": True}
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


def test_without_transformers_the_command_skips_with_one_line(tmp_path, capsys):
    python = _python_without_site(tmp_path)
    assert bench.main(["--reference-python", python]) == 0
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and err.strip().endswith(": skipped")
    assert "transformers' CSM is not importable by " + python in err and bench.PYTHON_ENV in err
    assert "No module named 'transformers'" in err
    line = json.loads(out.strip().splitlines()[-1])
    assert line == {"bench": "v2.reference", "family": "csm", "skipped": err.strip()}


def test_the_shared_command_locates_the_checkpoint_and_skips_saying_why(tmp_path, monkeypatch):
    monkeypatch.delenv(bench.ENV, raising=False)
    monkeypatch.setenv(bench.PYTHON_ENV, _python_without_site(tmp_path))
    path, _, why = command.locate("csm", None, None)
    assert path is None and bench.ENV in why
    path, _, why = command.locate("csm", str(tmp_path), None)
    assert path is None and why == f"{tmp_path} has no config.json (a CSM checkpoint in the transformers layout, " \
                                   f"e.g. {setup.CHECKPOINT}): skipped"
    monkeypatch.setenv(bench.ENV, str(CHECKPOINT))
    path, _, why = command.locate("csm", None, None)
    assert path is None and "No module named 'transformers'" in why
    missing = str(tmp_path / "no_python")
    assert bench.transformers_missing(missing).startswith(f"{missing}: ")


def test_the_stop_free_copy_changes_only_the_stop_id_and_runs_the_whole_budget(tmp_path, cref):
    from v2.models.csm.generate import generate
    from v2.models.csm.model import Csm

    copy = setup.without_stop(CHECKPOINT, tmp_path / "ck")
    before, after = (json.loads((d / "config.json").read_text()) for d in (CHECKPOINT, copy))
    assert before.pop("codebook_eos_token_id") == 0 and after.pop("codebook_eos_token_id") == before["vocab_size"] - 2
    assert after == before and (copy / "model.safetensors").resolve() == (CHECKPOINT / "model.safetensors").resolve()
    model = Csm.from_pretrained(copy)
    g = generate(model, torch.from_numpy(cref["s1_prompt_embeds"]), max_new_tokens=9)
    assert g.stop_frame == -1 and g.codes.shape[0] == 9  # s1 stops at frame 6 with the release's stop id
    assert np.array_equal(g.codes[:7].numpy(), cref["s1_gen_codes"])


def test_operations_per_frame_step_leave_the_prefill_and_views_out():
    def run(frames: int) -> None:
        x = torch.ones(3).view(3, 1) * 2  # a prefill: one operation (the view is not counted)
        for _ in range(frames):
            x = (x + 1).transpose(0, 1).exp()  # a frame step: two operations

    assert setup.ops_per_frame(run) == 2


def test_prompts_settings_and_the_workers_padding():
    ids = setup.prompts(6)
    assert [len(p) for p in ids] == [11, 14, 13, 11, 11, 14]
    assert all(p[0] == 128000 and p[-1] == 128001 and 128002 not in p for p in ids)
    assert setup.sampled_settings(CHECKPOINT) == {"temperature": 0.9, "top_k": 50, "depth_decoder_temperature": 0.9,
                                                  "depth_decoder_top_k": 50}
    worker = _worker()
    padded, mask = worker.left_padded([[1, 2, 3], [4]], pad_id=9)
    assert padded.tolist() == [[1, 2, 3], [9, 9, 4]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    codes = torch.ones(2, 4, 3, dtype=torch.long)  # [B, F, N]
    codes[1, 2, :2] = 0  # row 1 stops at frame 2 (codebooks 0..N-2 all 0; the last one is not looked at)
    assert worker.made(codes, 0) == [4, 3]
