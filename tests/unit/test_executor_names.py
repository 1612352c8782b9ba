"""`prepare` names one thing: what a family makes of a request at submit (`Family.prepare`). An executor's
host half is `pack` (`Executor.pack`, `Halves(pack, launch, read)`): no executor class under v2/ or tests/
defines a `prepare`, and no `Halves` is built from one."""

from __future__ import annotations

import ast
from pathlib import Path

import v2
from v2.runtime.family import Executor, Family, Halves

REPO = Path(v2.__file__).parent.parent


def _sources() -> list[Path]:
    return sorted([*(REPO / "v2").rglob("*.py"), *(REPO / "tests").rglob("*.py")])


def _executor_classes_with_prepare(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            if {"launch", "read"} <= methods and "prepare" in methods:
                out.append(node.name)
    return out


def _halves_of_prepare(tree: ast.AST) -> list[int]:
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Halves"
            and node.args and isinstance(node.args[0], ast.Attribute) and node.args[0].attr.startswith("prepare")]


def test_the_protocols_name_the_host_half_pack_and_the_family_prepare():
    assert hasattr(Executor, "pack") and not hasattr(Executor, "prepare")
    assert Halves(len, id, lambda host, batch: []).pack is len
    assert hasattr(Family, "prepare")


def test_the_check_sees_an_executor_named_the_old_way():
    old = ast.parse("class E:\n def prepare(self, b): ...\n def launch(self, p): ...\n def read(self, h, b): ...\n"
                    "x = Halves(e.prepare, e.launch, e.read)\n")
    assert _executor_classes_with_prepare(old) == ["E"] and _halves_of_prepare(old) == [5]


def test_no_executor_has_a_prepare():
    bad = [f"{f.relative_to(REPO)}: {name}" for f in _sources()
           for name in _executor_classes_with_prepare(ast.parse(f.read_text()))]
    bad += [f"{f.relative_to(REPO)}:{line}" for f in _sources() for line in _halves_of_prepare(ast.parse(f.read_text()))]
    assert not bad, bad
