"""`v2 serve --conversation-turns N --conversation-seconds S`: the speech stream's conversation caps
(`ServerConfig.conversation_turns`, `conversation_seconds`) as serve options, through the mapping every serve
option takes (`ServerConfig.from_options`, the same with and without `--replicas`); a bad value is refused
naming the option."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the server needs its extra: pip install v2[server]")

from v2.cli import build_parser  # noqa: E402
from v2.server.state import ServerConfig  # noqa: E402

CARD = "csm_tiny"


def _config(*argv: str) -> ServerConfig:
    args = build_parser().parse_args(["serve", "--card", CARD, *argv])
    return ServerConfig.from_options(CARD, args)


def test_the_conversation_caps_are_serve_options():
    config = _config("--conversation-turns", "3", "--conversation-seconds", "7.5")
    assert (config.conversation_turns, config.conversation_seconds) == (3, 7.5)
    assert _config("--conversation-turns", "0").conversation_turns == 0  # no earlier turns kept


def test_their_defaults_are_the_servers():
    config, default = _config(), ServerConfig.for_card(CARD)
    assert (config.conversation_turns, config.conversation_seconds) == (default.conversation_turns,
                                                                           default.conversation_seconds)


@pytest.mark.parametrize("option, value", [("--conversation-turns", "-1"), ("--conversation-turns", "two"),
                                           ("--conversation-turns", "1.5"), ("--conversation-seconds", "0"),
                                           ("--conversation-seconds", "nan"), ("--conversation-seconds", "inf"),
                                           ("--conversation-seconds", "soon")])
def test_a_bad_value_is_refused_naming_the_option(capsys, option, value):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["serve", option, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert option in err and value in err, err
