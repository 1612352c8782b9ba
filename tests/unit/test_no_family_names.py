"""The shared layer speaks no family: no module of `v2/` outside a family's package (`v2/families/<name>/`) and
the model packages (`v2/models/<name>/`) names a family. The names come from the registry (the shipped
families); each is matched in any spelling (`qwen3_tts`, `Qwen3-TTS`, `Qwen3TTS`, ...), and so is its first
word where that word is not a shared building block's name (the vendor: `moss` in `MossAudioDecoder`, `MOSS's`;
`qwen3` names the shared decoder architecture, `v2/models/qwen3.py`, and stays allowed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import v2
from v2.registry import families

ROOT = Path(v2.__file__).parent
SHARED_FOLDERS = {"kernels", "aut"}  # folders of v2/models that are shared building blocks, not a model's package


def shipped_families() -> list[str]:
    return sorted(name for name, package in families().items() if package.startswith("v2.families."))


def patterns(names: list[str]) -> list[re.Pattern[str]]:
    """A family name in any spelling (its words joined by nothing, '_', '-' or ' '), and its first word where
    no shared module of v2/models is named after it."""
    shared = {p.stem for p in (ROOT / "models").glob("*.py")} | SHARED_FOLDERS
    out = []
    for name in names:
        words = name.split("_")
        out.append(re.compile(r"(?<![a-z0-9])" + r"[-_ ]?".join(map(re.escape, words)), re.IGNORECASE))
        if len(words) > 1 and words[0] not in shared:
            out.append(re.compile(r"(?<![a-z0-9])" + re.escape(words[0]), re.IGNORECASE))
    return out


def shared_modules() -> list[Path]:
    """Every module outside the family packages and the model packages (the shared layer)."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if len(parts) > 2 and parts[0] == "families":
            continue  # v2/families/<name>/...
        if len(parts) > 2 and parts[0] == "models" and parts[1] not in SHARED_FOLDERS:
            continue  # v2/models/<name>/...
        out.append(path)
    return out


def test_the_registry_names_the_shipped_families():
    names = shipped_families()
    assert len(names) >= 2 and all(n.isidentifier() for n in names)


@pytest.mark.parametrize("text, named", [
    ("from v2.families.qwen3_tts import x", True), ("Qwen3-TTS 12 Hz", True), ("class Qwen3TTSConfig", True),
    ("MOSS-TTS-Local's prompt", True), ("MossAudioDecoder", True), ('card = "moss_tts_local_tiny"', True),
    ("v2.models.moss_codec", True), ("the Qwen3 decoder stack (v2/models/qwen3.py)", False),
    ("Qwen3Backbone", False), ("a family is a plugin", False)])
def test_the_check_finds_a_family_in_any_spelling_and_lets_the_architecture_be(text, named):
    assert any(p.search(text) for p in patterns(["moss_tts_local", "qwen3_tts"])) is named


def test_no_shared_module_names_a_family():
    found = patterns(shipped_families())
    modules = shared_modules()
    assert ROOT / "card.py" in modules and ROOT / "bench" / "launches.py" in modules  # the check reads them
    assert ROOT / "models" / "kernels" / "__init__.py" in modules
    bad = [f"{path.relative_to(ROOT.parent)}:{i}: {line.strip()}"
           for path in modules for i, line in enumerate(path.read_text().splitlines(), 1)
           if any(p.search(line) for p in found)]
    assert not bad, "modules outside v2/families/<name>/ and v2/models/<name>/ name a family:\n" + "\n".join(bad)


def test_the_default_card_is_the_one_shipped_card_that_says_so():
    import tomllib

    from v2.card import CARDS_DIR, DEFAULT_CARD, known_cards, load_card

    marked = [n for n in known_cards() if tomllib.loads(CARDS_DIR.joinpath(f"{n}.toml").read_text()).get("default")]
    assert marked == [DEFAULT_CARD] and load_card().default is True and load_card().name == DEFAULT_CARD
