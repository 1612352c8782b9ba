"""The `v2` command line (the console script `v2.cli:main`; `python -m v2`): synth, voices, cards, serve.

Owns: the package's public face, `main` and `build_parser` (v2/cli/commands.py). Its files: commands.py (the
parser, which command runs, one-line errors), options.py (the options and their checks), common.py (what the
commands that load a model share), synth.py, batch.py (`synth --batch`) and voices.py (`voices add|list|remove`).
Every name one file takes from another is public; `CliError` lives in v2/errors.py, so the server raises it
without importing the command line.
Must not know: model internals, scheduling, the server's internals.
"""

from v2.cli.commands import build_parser, main

__all__ = ["build_parser", "main"]
