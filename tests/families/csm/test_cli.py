"""The seeded `csm_tiny` card through the outer layers, with no change to them: `v2 synth` (its codes are the
runtime's for the same request; `--speaker` is the turn's speaker id), `python -m v2.bench --card csm_tiny`
(its codes equal the sequential reference loop's) and one HTTP request (`voice: "1"` is speaker 1; the audio is
the in-process runtime's, sample for sample after s16 rounding)."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import pytest

from v2.server import ServerConfig, create_app
from v2.server.audio import to_s16
from v2.server.serve import ThreadedServer

TEXT = "Hello there."


@pytest.fixture(scope="module")
def tiny():
    from v2.runtime import Runtime

    rt = Runtime.from_card("csm_tiny", device="cpu")
    yield rt
    rt.close()


def run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_synth_speaks_as_the_runtime(tmp_path, tiny):
    out = run(tmp_path, "v2", "synth", "--card", "csm_tiny", TEXT, "--speaker", "1", "--seed", "5", "--max-frames",
              "6", "-o", "a.wav", "--codes-out", "a.npy", "-q")
    assert out.returncode == 0, out.stderr[-2000:]
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["card"] == "csm_tiny" and line["frames"] == 6 and line["sample_rate"] == 24000
    expected = tiny.submit({"text": TEXT, "speaker": 1, "seed": 5, "max_frames": 6}).result()
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), expected.codes)
    other = tiny.submit({"text": TEXT, "speaker": 0, "seed": 5, "max_frames": 6}).result()
    assert not np.array_equal(other.codes, expected.codes)  # the speaker is part of the prompt


def test_bench_runs_the_card(tmp_path):
    out = run(tmp_path, "v2.bench", "--card", "csm_tiny", "--quick", "--requests", "2", "--max-frames", "4",
              "--concurrency", "1", "--no-progress")
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["card"] == "csm_tiny" and all(s["codes_match_baseline"] for s in report["scenarios"])


def test_one_http_request_with_a_speaker_voice(tiny):
    with ThreadedServer(create_app(tiny, ServerConfig.for_card("csm_tiny"))) as server:
        voices = httpx.get(server.url + "/v1/audio/voices", timeout=60).json()
        r = httpx.post(server.url + "/v1/audio/speech", json={"input": TEXT, "voice": "1", "seed": 3,
                                                              "max_new_tokens": 5, "response_format": "pcm",
                                                              "stream": False}, timeout=300)
        bad = httpx.post(server.url + "/v1/audio/speech", json={"input": TEXT, "instructions": "Whisper.",
                                                                "response_format": "pcm"}, timeout=300)
    assert {"0", "1"} <= {v["id"] for v in voices.get("voices", voices.get("data", []))}
    assert r.status_code == 200, r.text[:500]
    expected = tiny.submit({"text": TEXT, "speaker": 1, "seed": 3, "max_frames": 5}).result()
    assert np.array_equal(np.frombuffer(r.content, "<i2"), to_s16(expected.audio.T)[:, 0])
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "instructions", bad.text
