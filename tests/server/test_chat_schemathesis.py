"""Schemathesis over `/openapi.json`'s chat completions operation on a chat card (chatkit's scripted one, whose
request refuses what the family's does: a temperature between 0 and 0.25): every check, as
test_schemathesis.py runs them for the speech routes; a request the published body allows is answered, one it
forbids is refused, every answer as declared. Deterministic, a bounded number of examples."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatkit import ChatRuntime
from serverkit import LiveServer
from v2.server import ServerConfig

pytest.importorskip("schemathesis")
HERE = Path(__file__).resolve().parent


def test_schemathesis_finds_no_mismatch_between_the_chat_schema_and_the_server(tmp_path):
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    with LiveServer(ChatRuntime("chat_tiny"), ServerConfig.for_card("chat_tiny")) as server:
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "--no-color", "run", server.url + "/openapi.json",
             "--include-path", "/v1/chat/completions",
             "--checks", "all,negative_data_rejection_by_item", "--exclude-checks", "negative_data_rejection",
             "--max-examples", "30", "--generation-deterministic", "--workers", "1", "--request-timeout", "120",
             "--suppress-health-check", "all", "--output-sanitize", "false", "--max-response-time", "600"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    report = "\n".join(line[:600] for line in run.stdout.splitlines())
    assert run.returncode == 0, report[-12000:] + run.stderr[-3000:]
    assert "Tested: 1" in run.stdout, report[-3000:]
