"""The plain-data and scheduling parts of the package import without torch (numpy is allowed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

TORCH_FREE = ["v2.contracts", "v2.sampling_settings", "v2.card", "v2.families.moss_tts_local", "v2.families.moss_tts_local.ar_decode", "v2.families.moss_tts_local.vocoder",
              "v2.families.moss_tts_local.encode", "v2.runtime.scheduler", "v2.runtime.family", "v2.runtime.paging", "v2.runtime.blocks", "v2.rl"]


def loads_torch(*modules: str) -> bool:
    code = f"import sys\nimport {', '.join(modules)}\nprint('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip() == "True"


def test_the_torch_free_modules_together_load_no_torch():
    assert not loads_torch(*TORCH_FREE)


@pytest.mark.parametrize("module", TORCH_FREE)
def test_each_torch_free_module_alone_loads_no_torch(module):
    assert not loads_torch(module)


def test_the_check_sees_torch_where_it_is_loaded():
    assert loads_torch("v2.models.sampling")


def _imports(path) -> set[str]:
    """Every module a file imports (at any depth: inside functions too)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_runtime_imports_no_family_and_no_model():
    """The seam: v2/runtime knows work kinds, plans, batches, slots, blocks, streams and handles; a family
    is handed to it (the card names it; `v2.card.family_of` finds it)."""
    from pathlib import Path

    import v2

    root = Path(v2.__file__).parent / "runtime"
    bad = {f"{f.name}: {m}" for f in sorted(root.glob("*.py")) for m in _imports(f)
           if m.startswith(("v2.models", "v2.families.")) or m == "torch.nn" and f.name != "weight_updates.py"}
    assert not bad, bad
    code = ("import sys\nimport v2.runtime.engine, v2.runtime.runtime, v2.runtime.lifecycle, v2.runtime.kv\n"
            "print(sorted(m for m in sys.modules if m.startswith(('v2.models', 'v2.families.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_runtime_names_no_family_and_holds_no_channel_count():
    import re
    from pathlib import Path

    import v2

    root = Path(v2.__file__).parent / "runtime"
    for f in sorted(root.glob("*.py")):
        text = f.read_text()
        assert not re.search(r"moss|qwen", text, re.IGNORECASE), f"{f.name} names a family"
        assert not re.search(r"(?<![\w.])1[23](?![\w.])", text), f"{f.name} holds a 12 / 13 literal"
