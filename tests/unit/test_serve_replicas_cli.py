"""`v2 serve --replicas N`: refused with one line before anything starts when N or the port cannot work."""

from __future__ import annotations

import pytest

from v2.cli import main


@pytest.mark.parametrize("argv, message", [
    (["serve", "--replicas", "0"], "--replicas: must be at least 1, got 0"),
    (["serve", "--replicas", "2", "--port", "0"], "--port: with --replicas, Ray Serve's proxy needs a fixed port"),
])
def test_replicas_options_are_checked_first(argv, message, capsys):
    assert main(argv + ["--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
