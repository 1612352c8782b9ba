"""`SpeechParams`, the request in no family's terms, and each family's mapping of it (`FamilyParams`): the
body parses strictly; a value with two names is taken under either and named as the client sent it; every
field a family's mapping sets is one its table names back to the parameter it came from, so a refusal of
any of them reaches the client as that parameter; the server and the shared request layer name no family."""

from __future__ import annotations

import re
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

import v2
from v2.errors import FieldError, RequestError
from v2.params import FamilyParams, Resolved, ResolvedTurn, SpeechParams
from v2.registry import families
from v2.server.errors import ApiError, runtime_field_error
from v2.server.schema import Limits, param_names, parse_body, plan, resolved

V2 = Path(v2.__file__).parent
PARSERS = {  # family -> its request parser, module and name (what its family's `parse` calls, no checkpoint needed)
    "csm": ("v2.families.csm.request", "parse"),
    "moss_tts_local": ("v2.families.moss_tts_local.request", "parse_request"),
    "qwen3_tts": ("v2.families.qwen3_tts.request", "parse"),
}
# families that speak their own reply (a chat card): the speech routes refuse them before any mapping
# (tests/server/test_chat_completions.py), so they have no speech parameters to map
CHAT_FAMILIES = frozenset({"qwen3_omni"})
FAMILIES = tuple(sorted(set(families()) - CHAT_FAMILIES))  # every registered speech family (a new one is covered)


def mapping(family: str) -> FamilyParams:
    return import_module(f"v2.families.{family}.params").SPEECH_PARAMS


def parse(family: str, fields: dict[str, Any]) -> Any:
    """The family's typed request from its fields (what `Runtime.parse` does, without a checkpoint)."""
    module, name = PARSERS[family]
    return getattr(import_module(module), name)(fields)


def test_every_registered_family_is_covered():
    assert set(PARSERS) == set(FAMILIES), "name the new family's request parser in PARSERS"
    assert CHAT_FAMILIES <= set(families()), "a chat family named here is registered"


def leaves(fields: dict[str, Any], prefix: str = "") -> set[str]:
    """A request's fields as dotted paths (a nested `sampling` to `sampling.audio.top_k`)."""
    out: set[str] = set()
    for key, value in fields.items():
        if isinstance(value, dict):
            out |= leaves(value, f"{prefix}{key}.")
        else:
            out.add(prefix + key)
    return out


# ----- SpeechParams --------------------------------------------------------------------------------------
@pytest.mark.parametrize("body, param", [
    ({"input": "hi", "seed": True}, "seed"),               # a bool is not a number
    ({"input": "hi", "top_k": "7"}, "top_k"),              # nor is a numeric string
    ({"input": "hi", "temperature": "0.5"}, "temperature"),
    ({"input": 5}, "input"),
    ({"input": "hi", "voice": {"name": "x"}}, "voice"),
    ({"input": "hi", "sampling": {}}, "sampling"),         # unknown fields are refused
    ({"input": "hi", "response_format": "ogg"}, "response_format"),
])
def test_a_body_parses_strictly(body, param):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as e:
        SpeechParams.model_validate(body)
    assert e.value.errors()[0]["loc"][0] == param


def test_a_voice_is_a_name_or_openai_s_id_object():
    assert SpeechParams(input="hi", voice="nova").voice_name() == "nova"
    assert SpeechParams.model_validate({"input": "hi", "voice": {"id": "narrator"}}).voice_name() == "narrator"
    assert SpeechParams(input="hi").voice_name() is None


@given(ours=st.one_of(st.none(), st.integers(1, 99)), peers=st.one_of(st.none(), st.integers(1, 99)))
def test_a_value_with_two_names_is_taken_under_either_and_named_as_sent(ours, peers):
    params = SpeechParams(input="hi", max_frames=ours, max_new_tokens=peers)
    assert params.named("max_new_tokens") == params.named("max_frames") == \
        ("max_frames" if ours is not None else "max_new_tokens")
    assert params.named("seed") == "seed"
    if ours is not None and peers is not None and ours != peers:
        with pytest.raises(FieldError) as e:
            params.frame_limits()
        assert e.value.field == "max_frames"
        assert str(e.value) == "max_frames: give max_frames or max_new_tokens, not two different values"
    else:
        assert params.frame_limits() == (ours if ours is not None else peers, None)


# ----- each family's mapping --------------------------------------------------------------------------------
BODIES = st.fixed_dictionaries({"input": st.text("abc .", min_size=1, max_size=20).filter(str.strip)}, optional={
    "instructions": st.just("calm"), "language": st.sampled_from(["English", "en"]), "seed": st.integers(0, 99),
    "temperature": st.one_of(st.just(0.0), st.floats(0.25, 3.0)), "top_k": st.integers(0, 500),
    "top_p": st.floats(0.01, 1.0), "repetition_penalty": st.floats(0.8, 2.0), "max_frames": st.integers(5, 99),
    "min_new_tokens": st.integers(0, 4), "stream": st.booleans(), "voice": st.just("nova")})
RESOLVED = st.builds(Resolved, stream=st.booleans(), reference_audio=st.sampled_from([None, b"RIFF"]),
                     voice=st.sampled_from([None, "stored"]), text_later=st.booleans())


@pytest.mark.parametrize("family", FAMILIES)
def test_the_family_object_gives_its_mapping(family):
    """Found through the bound family's class: what the server reads (`runtime.family.speech_params`)."""
    pytest.importorskip("torch")
    module = import_module(f"v2.families.{family}.family")
    classes = [c for c in vars(module).values() if isinstance(c, type) and getattr(c, "speech_params", None)]
    assert [c.speech_params for c in classes] == [mapping(family)]
    assert set(mapping(family).fields.values()) <= set(SpeechParams.model_fields)
    assert mapping(family).takes <= {"ref_audio", "x_vector_only_mode", "voice", "context"}


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=40, deadline=None)
@given(body=BODIES, resolved=RESOLVED)
def test_every_field_a_family_sets_names_its_parameter_and_parses(family, body, resolved):
    params = SpeechParams.model_validate(body)
    fields = mapping(family).request(params, resolved)
    table = mapping(family).fields
    assert leaves(fields) <= set(table), leaves(fields) - set(table)
    for path in leaves(fields):  # each from a value the client gave (or the server resolved for it)
        param = table[path]
        assert getattr(params, param) is not None or param in ("stream", "ref_audio", "voice") \
            or params.named(param) != param, (path, param)
    assert ("text" in fields) is not resolved.text_later
    if "x_vector_only" not in fields and resolved.text_later is False and resolved.voice is None:
        try:
            typed = parse(family, fields if resolved.reference_audio is None else
                          {k: v for k, v in fields.items() if not k.startswith("reference")})
        except RequestError as e:  # a value this family has no use for (CSM: instructions, a frame floor, a
            # repetition penalty): refused naming a field whose parameter the client sent
            assert e.field in table and table[e.field] in body and str(e).startswith(f"{e.field}: this family "), \
                (e.field, str(e))
            return
        assert typed.text == params.input and typed.seed == (params.seed or 0)


KNOBS = {  # family -> where its first head's knobs land in its typed request, whether it takes a repetition penalty
    "csm": (lambda r: r, False), "moss_tts_local": (lambda r: r.sampling.audio, True), "qwen3_tts": (lambda r: r, True)}


def test_every_family_names_where_its_knobs_land():
    assert set(KNOBS) == set(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_sampling_knobs_reach_the_family_s_own_heads(family):
    knob, penalty = KNOBS[family]
    params = SpeechParams(input="hi", temperature=0.7, top_k=20, top_p=0.9, repetition_penalty=1.1 if penalty else None)
    typed = parse(family, mapping(family).request(params, Resolved(stream=False)))
    head = knob(typed)
    assert (head.temperature, head.top_k, head.top_p) == (0.7, 20, 0.9)


REFUSALS = [  # (body, the parameter named, how its message starts)
    ({"temperature": 9.0}, "temperature", "temperature: must be 0 (greedy) or lie in [0.25, 3.0], got 9.0"),
    ({"top_p": 0.0}, "top_p", "top_p: Input should be greater than 0"),
    ({"top_k": -1}, "top_k", "top_k: Input should be greater than or equal to 0"),
    ({"repetition_penalty": 5.0}, "repetition_penalty", "repetition_penalty: must lie in [0.8, 2.0]"),
    ({"seed": -1}, "seed", "seed: Input should be greater than or equal to 0"),
    ({"input": " "}, "input", "input: must not be empty or whitespace"),
    ({"max_new_tokens": 0}, "max_new_tokens", "max_new_tokens: Input should be greater than or equal to 1"),
    ({"max_frames": 0}, "max_frames", "max_frames: Input should be greater than or equal to 1"),
    ({"max_frames": 3, "min_new_tokens": 5}, "min_new_tokens", "min_new_tokens"),
]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("body, param, message", REFUSALS)
def test_a_family_s_refusal_names_the_parameter_the_client_sent(family, body, param, message):
    if param == "repetition_penalty" and not KNOBS[family][1]:
        message = "repetition_penalty: this family takes none"  # refused whatever its value
    params = SpeechParams.model_validate({"input": "hi", **body})
    fields = mapping(family).request(params, Resolved(stream=False))
    with pytest.raises(RequestError) as e:
        parse(family, fields)
    err = runtime_field_error(e.value, param_names(mapping(family), params))
    assert (err.status, err.param, err.code) == (400, param, "invalid_value")
    assert err.message.startswith(message), err.message


def test_an_input_a_family_does_not_take_is_refused_before_it_maps():
    body = SpeechParams(input="hi", ref_audio="UklGRg==", x_vector_only_mode=True)
    with pytest.raises(ApiError) as e:
        plan(body, Limits(("tts-1",)), native_rate=24000, native_channels=1, takes=mapping("moss_tts_local").takes)
    assert (e.value.param, e.value.code) == ("x_vector_only_mode", "unsupported")
    p = plan(body, Limits(("tts-1",)), native_rate=24000, native_channels=1, takes=mapping("qwen3_tts").takes)
    fields = mapping("qwen3_tts").request(p.params, Resolved(stream=False, reference_audio=p.reference))
    assert fields["x_vector_only"] is True and fields["reference_audio"] == b"RIFF"


@pytest.mark.parametrize("family", [f for f in FAMILIES if "context" not in mapping(f).takes])
def test_a_family_without_a_conversation_refuses_context_naming_it(family):
    for context in ([], [{"text": "Hi."}], [{"speaker": 0, "text": "Hi.", "audio": "UklGRg=="}]):
        body = SpeechParams.model_validate({"input": "hi", "context": context})
        with pytest.raises(ApiError) as e:
            plan(body, Limits(("tts-1",)), native_rate=24000, native_channels=1, takes=mapping(family).takes)
        assert (e.value.param, e.value.code) == ("context", "unsupported")
        assert e.value.message.startswith("context: ")


def test_context_turns_are_planned_resolved_and_named_in_the_client_s_terms():
    body = SpeechParams.model_validate({"input": "hi", "context": [
        {"speaker": 1, "text": "Hi.", "audio": "data:audio/wav;base64,UklGRg=="}, {"speaker": "0", "voice": "host"},
        {"text_ids": [5, 6]}]})
    p = plan(body, Limits(("tts-1",)), native_rate=24000, native_channels=1, takes={"context"})
    looked: list[tuple[str, str]] = []
    given = resolved(p, {}, stored=lambda name, where: looked.append((name, where)) or ([[1, 2]], "Welcome."))
    assert looked == [("host", "context[1].voice")]
    assert given.context == (ResolvedTurn(1, "Hi.", None, b"RIFF"), ResolvedTurn("0", "Welcome.", None, None, [[1, 2]]),
                             ResolvedTurn(None, None, (5, 6)))
    with pytest.raises(ApiError) as e:
        resolved(p, {})  # a stored voice needs a lookup
    assert (e.value.param, e.value.message.split(":")[0]) == ("context", "context[1].voice")
    for bad, where in (({"voice": "host", "text": "x"}, "context[0].voice"), ({"audio": "%%"}, "context[0].audio"),
                       ({"audio": "file:///etc/passwd"}, "context[0].audio")):
        with pytest.raises(ApiError) as e:
            plan(SpeechParams.model_validate({"input": "hi", "context": [bad]}), Limits(("tts-1",)),
                 native_rate=24000, native_channels=1, takes={"context"})
        assert (e.value.param, e.value.message.split(":")[0]) == ("context", where)
    with pytest.raises(ApiError) as e:
        parse_body({"input": "hi", "context": [{"text": "Hi."}, {"speaker": 1.5}]})
    assert (e.value.param, e.value.message.split(":")[0]) == ("context", "context[1].speaker")


def test_a_refusal_inside_a_turn_keeps_its_path():
    names = {"context.audio": "context", "context.speaker": "context", "sampling.audio.temperature": "temperature"}
    err = runtime_field_error(RequestError("context.0.speaker: must be >= 0", field="context.speaker"), names)
    assert (err.param, err.message) == ("context", "context.0.speaker: must be >= 0")
    err = runtime_field_error(RequestError("context.audio: too short", field="context.audio"), names)
    assert (err.param, err.message) == ("context", "context.audio: too short")
    err = runtime_field_error(RequestError("sampling.audio.temperature: too hot", field="sampling.audio.temperature"),
                              names)
    assert (err.param, err.message) == ("temperature", "temperature: too hot")  # a field under another name


# ----- no family outside its package ----------------------------------------------------------------------
def test_the_server_and_the_shared_request_layer_name_no_family():
    shared = [V2 / "params.py", V2 / "errors.py", V2 / "recording.py", V2 / "fields.py", *sorted((V2 / "server").glob("*.py"))]
    named = [f.name for f in shared if re.search(r"moss|qwen|csm|families\.", f.read_text(), re.IGNORECASE)]
    assert named == []
    assert not (V2 / "request.py").exists()  # a family's request lives in its package


@pytest.mark.parametrize("family", FAMILIES)
def test_the_server_finds_the_mapping_through_the_speech_family_protocol(family):
    """`family_params` reads a bound family typed as `SpeechFamily`; a family without `speech_params` cannot be
    served and is refused naming it."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from v2.server.schema import SpeechFamily, family_params

    module = import_module(f"v2.families.{family}.family")
    cls = next(c for c in vars(module).values() if isinstance(c, type) and getattr(c, "speech_params", None))
    bound = cls.__new__(cls)  # the class's attribute is what a bound instance reads
    assert isinstance(bound, SpeechFamily)
    assert family_params(SimpleNamespace(family=bound)) is mapping(family)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="speech_params"):
        family_params(SimpleNamespace(family=object()))  # type: ignore[arg-type]
