"""Schemathesis, the field's OpenAPI fuzzer, over the server's own `/openapi.json`, against a real server on
127.0.0.1: every check (no 5xx, every answer as the schema says, a 405 with `Allow` for every undeclared
method, and no mismatch between the schema and the server: a request the schema allows is not refused, one it
forbids is not taken), a bounded, deterministic run (schemathesis's deterministic mode: no seed drawn, no
example database; a few examples an operation), of the tiny card (alone, and with the tiny aligner) with caps
that keep each request cheap (12 frames, 48 characters, 3 items), and of a chat card's server (qwen3_omni_tiny,
its reply capped at 8 tokens and 8 frames: every operation, chat completions included, each tested).
`negative_data_rejection` runs as the hooks' `negative_data_rejection_by_item`:
the same check, but a batch's items fail alone in a 200 by design, so a forbidden batch answered 200 must hold an item
refused naming its field (tests/server/schemathesis_hooks.py). The voice store is a temporary folder. No
timing is assumed: the response-time limit is the request timeout's, far over any answer on a loaded machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from serverkit import CARD, LiveServer
from v2.card import load_card
from v2.runtime import Runtime
from v2.server import ServerConfig

pytest.importorskip("schemathesis")
HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("aligner", [None, "forced_aligner_tiny"])  # with one: word timestamps, the captioned path
def test_schemathesis_finds_no_mismatch_between_the_schema_and_the_server(tmp_path, aligner):
    card = load_card(CARD)  # a small frame cap, input cap and batch bound: every request the fuzzer sends is cheap
    ar = card.loops.ar_decode.model_copy(update={"max_frames": 12})
    runtime = Runtime.from_card(card.model_copy(update={"loops": card.loops.model_copy(update={"ar_decode": ar})}),
                                voices_dir=str(tmp_path / "voices"), aligner=aligner)
    try:
        with LiveServer(runtime, max_input_chars=48, max_batch_items=3) as server:
            run = _schemathesis(server.url, tmp_path)
    finally:
        runtime.close()
    assert run.returncode == 0, _readable(run.stdout)[-12000:] + run.stderr[-3000:]
    selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", run.stdout)
    assert selected and len(set(selected.groups())) == 1, run.stdout[-3000:]  # every operation, each tested


def test_schemathesis_finds_no_mismatch_on_a_chat_cards_server(tmp_path):
    """The omni chat card: chat completions run by the family itself (the input_audio formats it decodes, its
    reply's token cap, the parts and turns it renders), the speech operations' 404s, the voices it lists and
    the store it has not, models, health, metrics. Its reply is capped at 8 tokens and 8 frames in a card copy
    (the published max_tokens follows the cap): every request the fuzzer sends is cheap."""
    card: Any = load_card("qwen3_omni_tiny")  # the omni card (its loops: thinker, talker, code2wav)
    loops = card.loops.model_copy(update={name: getattr(card.loops, name).model_copy(update={"max_frames": 8})
                                          for name in ("thinker", "talker")})
    with Runtime.from_card(card.model_copy(update={"loops": loops}), device="cpu",
                           voices_dir=str(tmp_path / "voices")) as rt:
        with LiveServer(rt, ServerConfig.for_card("qwen3_omni_tiny")) as server:
            run = _schemathesis(server.url, tmp_path)
    assert run.returncode == 0, _readable(run.stdout)[-12000:] + run.stderr[-3000:]
    selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", run.stdout)
    assert selected and len(set(selected.groups())) == 1, run.stdout[-3000:]  # every operation, each tested
    assert "POST /v1/audio/voices" not in run.stdout  # not published on a chat card


def _schemathesis(url: str, cwd: Path, *only: str) -> subprocess.CompletedProcess[str]:
    """Every check, deterministic, a few examples an operation, over the server's own schema (`only`: more of
    the CLI's options, e.g. a path left out)."""
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "--no-color", "run", url + "/openapi.json", *only,
         "--checks", "all,negative_data_rejection_by_item", "--exclude-checks", "negative_data_rejection",
         "--max-examples", "12", "--generation-deterministic", "--workers", "1", "--request-timeout", "120",
         "--suppress-health-check", "all", "--output-sanitize", "false", "--max-response-time", "600"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _readable(report: str) -> str:
    """The CLI's report with long lines (the bytes of the audio it sent or was answered) cut short."""
    return "\n".join(line if len(line) <= 600 else line[:600] + " ..." for line in report.splitlines())
