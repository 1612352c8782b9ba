"""v2/cli/options.py split by what each part does: the options and their value checks stay there, what the
command line says back in the options' names (a refused request's fields, an unknown argument, an invalid
choice) is v2/cli/option_names.py's, re-exported where importers found it; both stay small, and the parser's
words are the same (a mistyped option and an invalid command still get their hints)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from v2.cli import main, option_names, options

CLI = Path(options.__file__).resolve().parent


def test_the_wording_lives_in_option_names_and_is_re_exported():
    assert options.in_option_names is option_names.in_option_names
    assert options.OPTION_FOR_FIELD is option_names.OPTION_FOR_FIELD
    assert option_names.in_option_names("sampling.audio.top_k: must lie in [0, 1]") == "--top-k: must lie in [0, 1]"
    for name in ("chosen_parser", "unrecognized", "choice_hint"):
        assert not hasattr(options, name) and callable(getattr(option_names, name))


@pytest.mark.parametrize("module", ["options.py", "option_names.py"])
def test_the_option_modules_stay_small(module):
    assert len((CLI / module).read_text().splitlines()) < 300


def test_the_hints_read_as_before(capsys):
    with pytest.raises(SystemExit) as e:
        main(["synht"])
    assert e.value.code == 2 and "did you mean synth?" in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    parser.add_argument("--temperature")
    assert option_names.unrecognized(["--temprature=1"], parser) == (
        "unrecognized arguments: --temprature=1; did you mean --temperature?")
