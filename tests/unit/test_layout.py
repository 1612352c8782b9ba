"""The three parts of what used to be one runtime folder, and who may import which (designs/runtime.md,
"Where to read"):
- v2/runtime/ (the engine core) imports neither the family kit (v2/kit/) nor a family, and the voice store
  (v2/voices/) only in `runtime.py`, the `Runtime` that holds one (`Runtime.voices`);
- v2/kit/ is imported only by families (v2/families/*) and by itself: no other module under v2/;
- v2/voices/ imports no engine, kit, family or model.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import v2

ROOT = Path(v2.__file__).parent
FACADE = ROOT / "runtime" / "runtime.py"  # holds the voice store: the one core module that imports v2.voices


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (inside functions and `if TYPE_CHECKING:` too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _offending(folder: Path, *packages: str, allow: tuple[Path, ...] = ()) -> set[str]:
    return {f"{f.relative_to(ROOT)}: {m}" for f in sorted(folder.rglob("*.py")) if f not in allow
            for m in _imports(f) if _under(m, *packages)}


def test_the_check_sees_an_import_where_there_is_one():
    assert "v2.runtime.family" in _imports(ROOT / "kit" / "paged_family.py")
    assert _offending(ROOT / "kit", "v2.runtime")  # the kit builds on the core
    assert _offending(ROOT / "runtime", "v2.voices")  # the facade's, which the next test allows by name


def test_the_core_imports_no_kit_no_family_and_the_voice_store_only_in_its_facade():
    assert not _offending(ROOT / "runtime", "v2.kit", "v2.families")
    assert not _offending(ROOT / "runtime", "v2.voices", allow=(FACADE,))


def test_only_families_import_the_kit():
    families, kit = ROOT / "families", ROOT / "kit"
    bad = {f"{f.relative_to(ROOT)}: {m}" for f in sorted(ROOT.rglob("*.py"))
           if families not in f.parents and kit not in f.parents for m in _imports(f) if _under(m, "v2.kit")}
    assert not bad, bad


def test_the_kit_names_no_family_and_holds_no_channel_count():
    """What the core promises of itself (tests/unit/test_import_boundaries.py), the kit, every family's, keeps."""
    import re

    assert not _offending(ROOT / "kit", "v2.families")
    for f in sorted((ROOT / "kit").glob("*.py")):
        text = f.read_text()
        assert not re.search(r"moss|qwen|csm", text, re.IGNORECASE), f"{f.name} names a family"
        assert not re.search(r"(?<![\w.])1[23](?![\w.])", text), f"{f.name} holds a 12 / 13 literal"


def test_the_voice_store_knows_no_engine_kit_family_or_model():
    assert not _offending(ROOT / "voices", "v2.runtime", "v2.kit", "v2.families", "v2.models")


def test_loading_the_core_loads_no_kit_and_the_store_loads_no_core():
    code = ("import sys\nimport v2.runtime.engine, v2.runtime.runtime, v2.runtime.lifecycle, v2.runtime.scatter\n"
            "print(sorted(m for m in sys.modules if m.startswith(('v2.kit', 'v2.families.'))))\n"
            "for m in [m for m in sys.modules if m.startswith('v2.')]: del sys.modules[m]\n"
            "import v2.voices.store\n"
            "print(sorted(m for m in sys.modules if m.startswith(('v2.runtime', 'v2.kit', 'v2.families.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "[]"]


def test_the_core_imports_no_aligner_and_no_model():
    """The word aligner is an added loop (v2/aligner/), found through the registry by name: the core names its
    loop ("aligner") and the service it offers (`WordAligner`), never its package or a model."""
    assert not _offending(ROOT / "runtime", "v2.aligner", "v2.models")
    assert not _offending(ROOT / "aligner", "v2.kit", "v2.families")  # it knows no family
