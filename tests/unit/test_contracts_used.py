"""Every class the contract between loops and the runtime declares is used outside it (an unused one, like
the `LoopResult` that no loop returned, misleads the reader about what flows through the seam)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import v2

ROOT = Path(v2.__file__).parent


def test_every_class_of_the_contract_is_used_in_the_package():
    contracts = ROOT / "contracts.py"
    declared = [n.name for n in ast.parse(contracts.read_text()).body if isinstance(n, ast.ClassDef)]
    assert declared
    others = "\n".join(p.read_text() for p in sorted(ROOT.rglob("*.py")) if p != contracts)
    unused = [name for name in declared if not re.search(rf"\b{name}\b", others)]
    assert not unused, unused
