"""A family is a plugin: one that lives outside `v2/` (tests/plugins/plugin_tts) is found through an entry
point of an installed distribution (a dist-info on the path, as pip leaves one) or `v2.registry.register`,
and runs through `v2 synth`, `v2 serve` (one HTTP request), `python -m v2.bench` and `rt.rollout`; no line
of `v2/` names it. Its model is MOSS-TTS-Local's, so its codes equal the shipped card's for one seed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pytest
import torch

from v2 import registry
from v2.card import CardError, card_path, load_card

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "tests" / "plugins"
V2 = ROOT / "v2"


def plugin_card(folder: Path) -> Path:
    """The shipped tiny MOSS card under the plugin family's name."""
    text = card_path("moss_tts_local_tiny").read_text()
    text = text.replace('name = "moss_tts_local_tiny"', 'name = "plugin_tts_tiny"', 1)
    text = re.sub(r'^family = "moss_tts_local"', 'family = "plugin_tts"', text, count=1, flags=re.M)
    path = folder / "plugin_tts_tiny.toml"
    path.write_text(text)
    return path


def installed(folder: Path) -> Path:
    """A site folder holding the plugin's distribution metadata: its entry point in the group `v2.families`."""
    info = folder / "site" / "plugin_tts_family-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-tts-family\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{registry.GROUP}]\nplugin_tts = plugin_tts\n")
    return info.parent


def env_with(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(PLUGINS), str(ROOT)]), "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def registered() -> Iterator[None]:
    sys.path.insert(0, str(PLUGINS))
    registry.register("plugin_tts", "plugin_tts")
    try:
        yield
    finally:
        registry.unregister("plugin_tts")
        sys.path.remove(str(PLUGINS))


def test_no_module_of_v2_names_the_plugin():
    assert not [p for p in V2.rglob("*.py") if "plugin_tts" in p.read_text()]


def test_the_shipped_families_are_found_by_their_folders():
    known = registry.families()
    assert known["moss_tts_local"] == "v2.families.moss_tts_local" and known["qwen3_tts"] == "v2.families.qwen3_tts"
    with pytest.raises(registry.UnknownFamily, match="v2.families"):
        registry.family_package("nobody")


def test_a_card_of_an_unknown_family_is_refused_naming_the_field(tmp_path):
    with pytest.raises(CardError, match="family: unknown family 'plugin_tts'.*entry-point group 'v2.families'"):
        load_card(plugin_card(tmp_path))


def test_a_registered_family_runs_rollouts_with_its_own_name(tmp_path, registered):
    import v2.rl
    from v2.runtime import Runtime

    card = load_card(plugin_card(tmp_path))
    assert card.family == "plugin_tts" and type(card).__module__ == "plugin_tts.card"
    with Runtime.from_card(card) as rt, Runtime.from_card("moss_tts_local_tiny") as shipped:
        (t,) = rt.rollout(["Plugged in."], n=1, seed=3, max_frames=8).trajectories(120)
        (s,) = shipped.rollout(["Plugged in."], n=1, seed=3, max_frames=8).trajectories(120)
        assert t.family == "plugin_tts" and s.family == "moss_tts_local"
        assert np.array_equal(t.codes, s.codes) and np.array_equal(t.logprobs, s.logprobs)
        with torch.no_grad():
            again = v2.rl.logprobs(rt.model, t)  # found through the registry by the trajectory's family
        torch.testing.assert_close(again[: len(t.codes)], torch.from_numpy(t.logprobs), atol=1e-5, rtol=0)


def test_an_installed_family_runs_through_the_cli_the_server_and_the_bench(tmp_path):
    site, card = installed(tmp_path), plugin_card(tmp_path)
    env = env_with(site)
    run = lambda *args: subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, env=env,  # noqa: E731
                                       capture_output=True, text=True, timeout=300)
    synth = run("v2", "synth", "--card", str(card), "Plugged in.", "-o", "a.wav", "--codes-out", "a.npy",
                "--seed", "5", "--max-frames", "6", "-q")
    assert synth.returncode == 0, synth.stderr[-2000:]
    shipped = run("v2", "synth", "Plugged in.", "-o", "b.wav", "--codes-out", "b.npy", "--seed", "5",
                  "--max-frames", "6", "-q")
    assert shipped.returncode == 0, shipped.stderr[-2000:]
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    assert json.loads(synth.stdout.strip().splitlines()[-1])["card"] == "plugin_tts_tiny"

    bench = run("v2.bench", "--card", str(card), "--quick", "--requests", "2", "--max-frames", "4",
                "--concurrency", "1", "--no-progress")
    assert bench.returncode == 0, bench.stderr[-2000:]
    assert json.loads(bench.stdout.strip().splitlines()[-1])["card"] == "plugin_tts_tiny"

    proc = subprocess.Popen([sys.executable, "-m", "v2", "serve", "--card", str(card), "--port", "0",
                             "--no-access-log", "--log-level", "warning"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r"at (http://127\.0\.0\.1:\d+) ", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")  # type: ignore[union-attr]
        r = httpx.post(match.group(1) + "/v1/audio/speech", json={"input": "Plugged in.", "max_new_tokens": 4,
                                                                   "response_format": "wav", "stream": False},
                       timeout=120)
        assert r.status_code == 200 and r.content[:4] == b"RIFF", r.text[:300]
        assert r.headers.get("x-finish-reason") in ("stop", "length")
    finally:
        proc.terminate()
        proc.wait(30)
