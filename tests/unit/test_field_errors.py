"""Field errors say their field as data: every raise site in v2/ gives `field=` (a server maps it to a
parameter, never reading the message), and the field survives pickling (errors cross process boundaries)."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from v2.fields import FieldError, int_tensor
from v2.errors import RequestError
from v2.voices.store import VoiceError

ROOT = Path(__file__).resolve().parents[2]
FIELD_ERRORS = {"RequestError", "FieldError", "VoiceError"}


def _calls_without_field(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    named = FIELD_ERRORS | ({"PromptError"} if path.name == "prompt.py" and path.parent.name == "models" else set())
    return [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in named
            and not any(k.arg == "field" for k in node.keywords)]


def test_every_raise_site_names_its_field():
    missing = [site for path in sorted((ROOT / "v2").rglob("*.py")) for site in _calls_without_field(path)]
    assert missing == [], f"give these errors field=... (None where no one field is to blame): {missing}"


@pytest.mark.parametrize("error", [RequestError("sampling.audio.top_k: bad", field="sampling.audio.top_k"),
                                   FieldError("reference_codes[1]: bad", field="reference_codes"),
                                   VoiceError("voice: bad", field="voice"), RequestError("no field given")])
def test_the_field_survives_pickling(error):
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), str(again), again.field) == (type(error), str(error), error.field)


def test_a_nested_row_is_named_in_the_message_and_the_field_is_the_whole_field():
    with pytest.raises(FieldError) as e:
        int_tensor([[1, 2], [3, 4.5]], "prompt_rows")
    assert (e.value.field, str(e.value)) == ("prompt_rows", "prompt_rows[1][1]: expected an integer, got float")
    with pytest.raises(FieldError) as e:
        int_tensor([[True]], "reference_codes", "reference_codes[2]")
    assert e.value.field == "reference_codes" and str(e.value).startswith("reference_codes[2][0][0]: ")
