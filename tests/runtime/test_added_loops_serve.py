"""`v2 serve --add-loop NAME[=TARGET]`: an added loop (v2/runtime/added.py) refused with one line naming the option
before any model loads, and otherwise handed to the one runtime's `Runtime.from_card(add_loops=...)` and to every
replica's under `--replicas` (no model is loaded and no Ray is started: both are stopped where they would be)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from v2 import registry
from v2.cli import build_parser, main

sys.path.insert(0, str(Path(__file__).parent))

CARD = "qwen3_tts_tiny"


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    registry.register_added_loop("probe", "added_probe:FACTORY")
    try:
        yield
    finally:
        registry.unregister_added_loop("probe")


@pytest.mark.parametrize("option, message", [
    ("nope", "--add-loop: card qwen3_tts_tiny: add_loops.nope.loop: unknown added loop 'nope' (known: "),
    ("x=added_probe:WORDS", "--add-loop: card qwen3_tts_tiny: add_loops.x.after: it takes words"),
])
def test_an_added_loop_that_cannot_be_driven_is_one_line_before_anything_loads(option, message, capsys):
    assert main(["serve", "--card", CARD, "--device", "cpu", "--port", "0", "--add-loop", option]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


class Stop(Exception):
    pass


def test_the_option_reaches_the_runtime(monkeypatch):
    pytest.importorskip("fastapi", reason="the server needs its extra: pip install v2[server]")
    from v2.server import serve

    seen: dict[str, Any] = {}

    def from_card(card: str, **kw: Any) -> Any:
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(serve.Runtime, "from_card", from_card)
    args = build_parser().parse_args(["serve", "--card", CARD, "--port", "0", "--add-loop", "probe",
                                      "--add-loop", "second=added_probe:FACTORY"])
    with pytest.raises(Stop):
        serve.run(args)
    assert seen["add_loops"] == ("probe", "second=added_probe:FACTORY")


def test_the_option_reaches_every_replica(monkeypatch):
    pytest.importorskip("ray", reason="the replicas path needs Ray: pip install -e \".[ray,server]\"")
    pytest.importorskip("fastapi", reason="the server needs its extra: pip install v2[server]")
    from v2.cluster import serve as cluster_serve

    built: dict[str, Any] = {}

    def deployment(card: str, **kw: Any) -> Any:
        built.update(kw)
        raise Stop

    monkeypatch.setattr(cluster_serve, "start_ray", lambda show_logs: None)
    monkeypatch.setattr(cluster_serve.ray, "cluster_resources", lambda: {})
    monkeypatch.setattr(cluster_serve, "deployment", deployment)
    args = build_parser().parse_args(["serve", "--card", CARD, "--replicas", "2", "--add-loop", "probe"])
    with pytest.raises(Stop):
        cluster_serve.run(args)
    assert built["runtime_options"]["add_loops"] == ("probe",)
