"""The benches' command lines: every option of every `python -m v2.bench...` parser has a help text that gives its
default (read from the source, no bench is run), and the progress bar draws its `\\r` frames only on a terminal."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from v2.bench.__main__ import Bar

BENCH = Path(__file__).resolve().parents[2] / "v2" / "bench"


def options() -> list[tuple[str, int, str, dict[str, ast.expr]]]:
    found = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                flag = ast.unparse(node.args[0]) if node.args else "?"
                found.append((path.name, node.lineno, flag, {k.arg: k.value for k in node.keywords if k.arg}))
    return found


def test_every_bench_option_has_help_that_gives_its_default():
    assert len(options()) > 60  # every bench's parser was read
    missing, no_default = [], []
    for name, line, flag, kw in options():
        where = f"{name}:{line} {flag}"
        if "help" not in kw:
            missing.append(where)
            continue
        help_ = ast.unparse(kw["help"])
        flagged = ast.unparse(kw.get("action", ast.Constant(None))) in ("'store_true'", "'store_false'")
        if not flagged and "default" not in help_:
            no_default.append(where)
    assert missing == [] and no_default == [], (missing, no_default)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_writes_no_frames_to_a_pipe_or_a_file():
    piped = io.StringIO()
    bar = Bar(3, enabled=True, out=piped)
    bar.stage("baseline")
    bar.tick()
    bar.close()
    assert piped.getvalue() == ""
    tty = Terminal()
    bar = Bar(3, enabled=True, out=tty)
    bar.stage("baseline")
    bar.tick()
    bar.close()
    assert tty.getvalue().count("\r") == 2 and "1/3" in tty.getvalue() and tty.getvalue().endswith("\n")
    quiet = Terminal()
    Bar(3, enabled=False, out=quiet).tick()  # --no-progress
    assert quiet.getvalue() == ""
