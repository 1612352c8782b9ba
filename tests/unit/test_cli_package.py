"""The command line is one package whose files share only public names, and the server raises `CliError`
without importing it (the only import circle between the two was that class)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import v2

ROOT = Path(v2.__file__).parent


def _imports_from(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every `from MODULE import NAME` in a file, at any depth (inside functions too)."""
    tree = ast.parse(path.read_text())
    return [(node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names]


def _of_the_cli(module: str) -> bool:
    return module == "v2.cli" or module.startswith(("v2.cli.", "v2.cli_"))


def test_the_command_line_is_a_package():
    assert (ROOT / "cli" / "__init__.py").is_file()
    assert not list(ROOT.glob("cli*.py")), "the command line's modules live in v2/cli/"


def test_no_file_imports_a_private_name_of_the_command_line():
    bad = [f"{path.relative_to(ROOT)}: {module}.{name}" for path in sorted(ROOT.rglob("*.py"))
           for module, name in _imports_from(path) if _of_the_cli(module) and name.startswith("_")]
    assert not bad, bad


def test_the_server_takes_only_the_entry_point_of_the_command_line():
    """`python -m v2.server.serve` hands its arguments to `v2 serve`; nothing else of v2/server imports the CLI."""
    uses = {(str(path.relative_to(ROOT)), module, name) for path in sorted((ROOT / "server").rglob("*.py"))
            for module, name in _imports_from(path) if _of_the_cli(module)}
    assert uses == {("server/serve.py", "v2.cli", "main")}


def test_cli_error_is_one_class_for_the_command_line_and_the_server():
    pytest.importorskip("uvicorn")  # the server extra
    from v2.cli import common
    from v2.errors import CliError
    from v2.server import serve

    assert serve.CliError is CliError and common.CliError is CliError
    assert common.expected(CliError("x"))
