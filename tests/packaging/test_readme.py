"""What the README tells a new user to type works as written in a fresh shell: every command that runs the venv's
`v2`, `hf`, `python -m v2` or `pip` comes after the line that activates the venv; the torch build each machine
gets, the batch endpoint, `/docs` and the quick bench are on the page. (The batch example itself is sent to a
server in tests/server/test_docs_page.py.)"""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
ACTIVATE = "source .venv/bin/activate"


def shell_lines() -> list[tuple[int, str]]:
    """(offset in the README, line) of every line in a fenced block that is not Python."""
    found = []
    for block in re.finditer(r"```(\w*)\n(.*?)```", README, re.S):
        if block.group(1) == "python":
            continue
        offset = block.start(2)
        for line in block.group(2).splitlines(keepends=True):
            found.append((offset, line.strip()))
            offset += len(line)
    return found


def test_every_venv_command_comes_after_the_venv_is_activated():
    first = README.index(ACTIVATE)
    venv_commands = [(at, line) for at, line in shell_lines()
                     if re.match(r"(v2 |hf |python -m v2|pip install|.*\| v2 )", line)]
    assert len(venv_commands) >= 8, venv_commands
    early = [line for at, line in venv_commands if at < first]
    assert early == [], f"run before `{ACTIVATE}` is said: {early}"
    assert README.index("bash scripts/synth.sh") < first  # the first command needs no venv: it makes it


def test_the_page_says_which_torch_each_machine_gets_and_how_to_choose():
    for words in ("torch==2.13.0+cpu", "https://download.pytorch.org/whl/cpu", "V2_TORCH=cuda", "V2_TORCH_INDEX",
                  "nvidia-smi", ".venv/setup.log", "1.0 GB venv", "2.7 GB"):
        assert words in README, words


def test_the_batch_endpoint_docs_and_the_quick_bench_are_on_the_page():
    assert "curl -s http://127.0.0.1:8000/v1/audio/speech/batch" in README
    assert "`/docs`" in README and "python -m v2.bench --quick" in README
