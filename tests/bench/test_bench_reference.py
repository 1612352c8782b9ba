"""The reference comparison's plumbing that runs without a copy of the reference: where it looks (the card's
family's environment variable, else the family's default: CSM's, Qwen3-TTS's and Qwen3-Omni's tiny fixture checkpoints), why it skips (no copy, not a copy, a family with no comparison), and
MOSS-TTS-Local's worker's left padding (the reference's processor layout)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from v2.bench import reference
from v2.families.moss_tts_local.bench import reference as moss

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_reference_copy_the_scenario_is_skipped_with_the_reason(monkeypatch, tmp_path):
    family = "moss_tts_local"
    monkeypatch.delenv(moss.ENV, raising=False)
    path, python, why = reference.locate(family, None, None)
    assert path is None and python == sys.executable and moss.ENV in why
    path, _, why = reference.locate(family, str(tmp_path), None)  # a folder that is not the reference
    assert path is None and "moss_tts_local_v1.5/modeling_moss_tts.py" in why
    (tmp_path / "moss_tts_local_v1.5").mkdir()
    (tmp_path / "moss_tts_local_v1.5" / "modeling_moss_tts.py").write_text("")
    monkeypatch.setenv(moss.ENV, str(tmp_path))
    monkeypatch.setenv(moss.PYTHON_ENV, "/some/python")
    assert reference.locate(family, None, None) == (tmp_path, "/some/python", "")


@pytest.mark.parametrize("family", ["csm", "qwen3_tts", "qwen3_omni"])
def test_a_family_with_a_default_reference_runs_it_without_the_flag(family, monkeypatch, tmp_path):
    hooks = reference.hooks(family)
    monkeypatch.delenv(hooks.ENV, raising=False)
    checked: list[Path] = []

    def check(path: Path) -> str:
        checked.append(path)
        return ""

    monkeypatch.setattr(hooks, "check", check)
    path, _, why = reference.locate(family, None, None)
    assert path == hooks.DEFAULT_REFERENCE and path is not None and path.exists() and why == ""
    assert checked == [path] and (path / "config.json").exists()  # the tiny fixture's checkpoint
    monkeypatch.setattr(hooks, "DEFAULT_REFERENCE", tmp_path / "gone")  # a default that is not there: the skip
    path, _, why = reference.locate(family, None, None)
    assert path is None and hooks.ENV in why


def test_a_family_without_a_comparison_is_skipped_saying_so(monkeypatch):
    monkeypatch.setattr(reference, "part", lambda family, name: None)  # every shipped family has one
    path, _, why = reference.locate("qwen3_tts", "/anywhere", None)
    assert path is None and why == "family 'qwen3_tts' has no reference comparison: skipped"


def test_the_command_prints_one_json_line_saying_it_skipped(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "v2.bench.reference", "--reference", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["bench"] == "v2.reference" and "skipped" in report["skipped"]
    assert report["family"] == "moss_tts_local"  # the default card's


def test_the_worker_left_pads_with_filler_rows_masked_out():
    spec = importlib.util.spec_from_file_location("reference_worker", moss.WORKER)
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    a, b = torch.arange(3 * 13).view(3, 13), torch.arange(13).view(1, 13) + 100
    ids, mask = worker.left_padded([a, b], pad_id=7, pad_code=9)
    assert ids.shape == (2, 3, 13) and torch.equal(ids[0], a) and torch.equal(ids[1, 2], b[0])
    assert ids[1, :2, 0].tolist() == [7, 7] and (ids[1, :2, 1:] == 9).all()
    assert mask.tolist() == [[True, True, True], [False, False, True]]
    prompts = moss.fixture_prompts(3)
    assert [p.shape[0] for p in prompts] == [102, 92, 102] and all(p.shape[1] == 13 for p in prompts)
