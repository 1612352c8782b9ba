"""Shared test fixtures: the reference checkpoint, its arrays, the tiny card's model, compiling Triton kernels
for a GPU that is not there, and one intra-op thread for the tests' own thread."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():  # Triton kernels run in Triton's interpreter on the CPU (before any v2 import)
    os.environ.setdefault("TRITON_INTERPRET", "1")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODEL_DIR = FIXTURES / "moss_tts_local_tiny"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def one_thread() -> Iterator[None]:
    """The tests' own thread runs torch on one intra-op thread, as the tiny cards' engine threads do
    (`cpu_threads = 1`): step-sized ops on tiny models run several times faster so on a shared CPU (a model
    call here took 0.6 s on one thread, 9.6 s on two, on a loaded 2-core machine). The bits do not depend on
    the thread count (fixed tiles and summation orders: designs/model.md, "Exact on every CPU"), and a
    runtime's engine and device threads set their own count where the card names one."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="session")
def ref() -> dict[str, np.ndarray]:
    with np.load(MODEL_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def ref_model():
    from v2.models.moss_tts_local.model import MossTTSLocal

    return MossTTSLocal.from_pretrained(MODEL_DIR / "checkpoint")


@pytest.fixture(scope="session")
def tiny_card():
    from v2.card import load_card

    return load_card("moss_tts_local_tiny")


@pytest.fixture(scope="session")
def tiny_model(tiny_card):
    from v2.card import build_model

    return build_model(tiny_card)


CODEC_DIR = FIXTURES / "moss_codec_tiny"


@pytest.fixture(scope="session")
def codec_ref() -> dict[str, np.ndarray]:
    with np.load(CODEC_DIR / "reference.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="session")
def ref_codec():
    from v2.models.moss_codec import MossAudioDecoder

    return MossAudioDecoder.from_pretrained(CODEC_DIR / "checkpoint")


@pytest.fixture(scope="session")
def tiny_codec(tiny_card):
    from v2.card import build_codec

    return build_codec(tiny_card)


def check_exact(model, t) -> None:
    """A trajectory's logprobs equal the teacher-forced recompute's (frames and the final stop) within 1e-5."""
    from v2.families.moss_tts_local.recompute import logprobs

    with torch.no_grad():
        again = logprobs(model, torch.from_numpy(t.prompt_rows), torch.from_numpy(t.codes), t.sampling,
                         min_frames=t.min_frames, final_stop=t.stop_logprob is not None)
    f = len(t.codes)
    torch.testing.assert_close(again[:f], torch.from_numpy(t.logprobs), atol=1e-5, rtol=0)
    if t.stop_logprob is not None:
        assert abs(float(again[f, 0]) - t.stop_logprob) < 1e-5


def doom_requests(rt, monkeypatch) -> set[int]:
    """Requests whose ids go into the returned set fail in their AR loop code ("injected") from then on."""
    doomed: set[int] = set()
    real_advance = rt.family.ar_loop.advance

    def advance(state, plan, row):
        if state.request_id in doomed:
            raise RuntimeError("injected")
        return real_advance(state, plan, row)

    monkeypatch.setattr(rt.family.ar_loop, "advance", advance)
    return doomed


def wait_idle(rt, timeout: float = 20.0) -> dict:
    """Wait until a runtime holds no request, slot or queue entry; its stats then."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = rt.stats()
        if s["running"] == s["waiting"] == s["kv_slots_in_use"] == s["codec_slots_in_use"] == 0:
            return s
        time.sleep(0.01)
    raise AssertionError(f"runtime not idle: {rt.stats()}")


@pytest.fixture
def hopper_compile(tmp_path: Path) -> Callable[..., list[int]]:
    """Run a script that compiles kernels for sm_90 and prints each cubin's size; returns the sizes.

    A fresh process without TRITON_INTERPRET (the interpreter patches triton.language while it runs in
    this one) and with an empty kernel cache, so the compiler really runs.
    """

    def run(script: str, *args: str) -> list[int]:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["TRITON_CACHE_DIR"] = str(tmp_path)
        done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return [int(n) for n in done.stdout.split()]

    return run
