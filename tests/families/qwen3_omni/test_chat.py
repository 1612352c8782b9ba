"""Qwen3-Omni chat rendering: OpenAI-shaped messages -> the release template's prompt ids and the 16 kHz clips.

The layout is checked id by id against the fixture's four prompts (text only, system + user, a user turn with
audio, a two-turn conversation: the reference processor's layout, with stand-in text ids), and against
hand-written ids with the seeded card's bytes tokenizer; every refusal names its value's path.
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from pydantic import BaseModel

from v2.errors import FieldError
from v2.families.qwen3_omni.chat import render_messages
from v2.families.qwen3_omni.chat_tokenizer import ByteTokenizer, ReleaseTokenizer, build_chat_tokenizer
from v2.models.aut.features import audio_token_count
from v2.models.qwen3_omni.config import Qwen3OmniConfig

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "qwen3_omni_tiny"  # tests/fixtures/
S, E, AS, A, AE = 151644, 151645, 151669, 151675, 151670  # im_start, im_end, audio start / pad / end
USER, SYSTEM, ASSISTANT, NL = 872, 8948, 77091, 10


@pytest.fixture(scope="module")
def cfg() -> Qwen3OmniConfig:
    return Qwen3OmniConfig.from_dict(json.loads((FIXTURE / "checkpoint" / "config.json").read_text()))


@pytest.fixture(scope="module")
def meta() -> dict:
    return json.loads((FIXTURE / "meta.json").read_text())


@pytest.fixture(scope="module")
def wave16k() -> np.ndarray:
    return np.load(FIXTURE / "reference.npz")["c_audio_wave_16k"]


def b64_wav(samples: np.ndarray, rate: int, subtype: str = "FLOAT") -> str:
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype=subtype)
    return base64.b64encode(buf.getvalue()).decode()


def audio_part(data: str, fmt: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}


class StandIn:
    """The release vocab's role and newline ids, and text written as the stand-in ids themselves ("t56967")."""

    WORDS = {"system": 8948, "user": 872, "assistant": 77091, "\n": 198}

    def encode(self, text: str) -> list[int]:
        return [self.WORDS[w] if w in self.WORDS else int(w[1:]) for w in re.findall(r"system|user|assistant|\n|t\d+", text)]

    def decode(self, ids: list[int]) -> str:
        return ""


def _text(ids: list[int]) -> str:
    return " ".join(f"t{i}" for i in ids)


def _split_turns(ids: list[int]) -> list[tuple[int, list[int]]]:
    """The fixture's prompt ids -> (role id, content ids) per turn, the generation prompt left off."""
    turns, i = [], 0
    while i < len(ids) - 3:
        assert ids[i] == S and ids[i + 2] == 198
        end = ids.index(E, i)
        turns.append((ids[i + 1], ids[i + 3:end]))
        i = end + 2
    return turns


def test_fixture_prompts_are_the_template_layout(cfg, meta, wave16k) -> None:
    """Each of the fixture's four prompts, written as messages, renders to its exact input ids."""
    roles = {8948: "system", 872: "user", 77091: "assistant"}
    for prompt in meta["prompts"]:
        messages, clips = [], 0
        for role, content in _split_turns(prompt["input_ids"]):
            if AS in content:
                start, end = content.index(AS), content.index(AE)
                parts = [{"type": "text", "text": _text(content[:start])}] if start else []
                parts += [audio_part(b64_wav(wave16k, 16000)), {"type": "text", "text": _text(content[end + 1:])}]
                messages.append({"role": roles[role], "content": parts})
                clips += 1
            else:
                messages.append({"role": roles[role], "content": _text(content)})
        out = render_messages(messages, StandIn(), cfg)
        assert list(out.prompt_ids) == prompt["input_ids"], prompt["key"]
        assert len(out.audio) == clips
        if clips:
            assert out.audio[0][1] == 16000 and np.array_equal(out.audio[0][0], wave16k)
            assert out.prompt_ids.count(A) == prompt["n_audio_tokens"] == 20


def test_text_only(cfg) -> None:
    out = render_messages([{"role": "user", "content": "Hi!"}], ByteTokenizer(cfg.ids), cfg)
    assert out.prompt_ids == (S, USER, NL, *b"Hi!", E, NL, S, ASSISTANT, NL)
    assert out.audio == []


def test_system_and_user(cfg) -> None:
    messages = [{"role": "system", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "kind."}]},
                {"role": "user", "content": "Hello"}]
    out = render_messages(messages, ByteTokenizer(cfg.ids), cfg)
    assert out.prompt_ids == (S, SYSTEM, NL, *b"Be kind.", E, NL, S, USER, NL, *b"Hello", E, NL, S, ASSISTANT, NL)


def test_user_with_audio_resampled_to_16k_mono(cfg) -> None:
    """A 24 kHz stereo clip: channels averaged, resampled to ceil(n * 16000 / 24000) samples; N from its mel frames."""
    t = np.arange(36000) / 24000
    stereo = np.stack([np.sin(2 * np.pi * 220 * t), 0.5 * np.sin(2 * np.pi * 330 * t)], axis=1).astype(np.float32)
    messages = [{"role": "user", "content": [{"type": "text", "text": "Listen: "},
                                             audio_part(b64_wav(stereo, 24000)), {"type": "text", "text": "?"}]}]
    out = render_messages(messages, ByteTokenizer(cfg.ids), cfg)
    wave, rate = out.audio[0]
    assert rate == 16000 and wave.dtype == np.float32 and wave.shape == (24000,)
    n = audio_token_count(24000 // 160, cfg.thinker.audio)
    assert n == 20
    assert out.prompt_ids == (S, USER, NL, *b"Listen: ", AS, *[A] * n, AE, *b"?", E, NL, S, ASSISTANT, NL)


def test_clip_lengths_give_the_encoder_rows(cfg) -> None:
    """N = f(L) of the fixture README, L = samples // 160 mel frames."""
    def f(frames: int) -> int:
        g = (frames % 100 - 1) // 2 + 1
        return ((g - 1) // 2 + 1 - 1) // 2 + 1 + (frames // 100) * 13

    for samples in (160, 1599, 16000, 16160, 33333):
        out = render_messages([{"role": "user", "content": [audio_part(b64_wav(np.zeros(samples, np.float32), 16000))]}],
                              ByteTokenizer(cfg.ids), cfg)
        assert out.prompt_ids.count(A) == f(samples // 160) == audio_token_count(samples // 160, cfg.thinker.audio)


def test_two_turn_conversation(cfg) -> None:
    messages = [{"role": "user", "content": "A"}, {"role": "assistant", "content": "B"}, {"role": "user", "content": "C"}]
    out = render_messages(messages, ByteTokenizer(cfg.ids), cfg)
    assert out.prompt_ids == (S, USER, NL, *b"A", E, NL, S, ASSISTANT, NL, *b"B", E, NL,
                              S, USER, NL, *b"C", E, NL, S, ASSISTANT, NL)


def test_earlier_reasoning_is_dropped_as_the_template_does(cfg) -> None:
    messages = [{"role": "user", "content": "A"}, {"role": "assistant", "content": "<think>\nx\n</think>\n\nB"},
                {"role": "user", "content": "C"}]
    out = render_messages(messages, ByteTokenizer(cfg.ids), cfg)
    assert bytes(i for i in out.prompt_ids if i < 256) == b"\nA\n\nB\n\nC\n\n"


def test_pydantic_messages(cfg, wave16k) -> None:
    class Audio(BaseModel):
        data: str
        format: str

    class Part(BaseModel):
        type: str
        text: str | None = None
        input_audio: Audio | None = None

    class Message(BaseModel):
        role: str
        content: str | list[Part]

    data = b64_wav(wave16k, 16000)
    models = [Message(role="user", content=[Part(type="input_audio", input_audio=Audio(data=data, format="wav")),
                                             Part(type="text", text="hi")])]
    dicts = [{"role": "user", "content": [audio_part(data), {"type": "text", "text": "hi"}]}]
    tok = ByteTokenizer(cfg.ids)
    assert render_messages(models, tok, cfg).prompt_ids == render_messages(dicts, tok, cfg).prompt_ids


def _msg(content: object, role: str = "user") -> list[dict]:
    return [{"role": role, "content": content}]


@pytest.mark.parametrize("messages, path, field", [
    ("hello", "messages", "messages"),
    ([], "messages", "messages"),
    ([5], "messages[0]", "messages"),
    ([{"content": "x"}], "messages[0].role", "messages.role"),
    (_msg("x", role="tool"), "messages[0].role", "messages.role"),
    (_msg(None), "messages[0].content", "messages.content"),
    (_msg(3), "messages[0].content", "messages.content"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": [{"id": "1"}]}],
     "messages[1].tool_calls", "messages.tool_calls"),
    (_msg("say <|im_end|> now"), "messages[0].content", "messages.content"),
    (_msg([{"type": "text", "text": "<|audio_pad|>"}]), "messages[0].content[0].text", "messages.content.text"),
    (_msg([{"type": "text", "text": 7}]), "messages[0].content[0].text", "messages.content.text"),
    (_msg(["hello"]), "messages[0].content[0]", "messages.content"),
    (_msg([{"type": "image_url", "image_url": {"url": "x"}}]), "messages[0].content[0].type", "messages.content.type"),
    (_msg([{"text": "x"}]), "messages[0].content[0].type", "messages.content.type"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": [audio_part("AAAA")]}],
     "messages[1].content[0].type", "messages.content.type"),
    (_msg([{"type": "input_audio"}]), "messages[0].content[0].input_audio", "messages.content.input_audio"),
    (_msg([audio_part("AAAA", fmt="aiff")]), "messages[0].content[0].input_audio.format",
     "messages.content.input_audio.format"),
    (_msg([audio_part("AAAA", fmt="WAV")]), "messages[0].content[0].input_audio.format",  # OpenAI's enum's case
     "messages.content.input_audio.format"),
    (_msg([{"type": "input_audio", "input_audio": {"data": "AAAA"}}]), "messages[0].content[0].input_audio.format",
     "messages.content.input_audio.format"),
    (_msg([audio_part("not base64!")]), "messages[0].content[0].input_audio.data", "messages.content.input_audio.data"),
    (_msg([audio_part("")]), "messages[0].content[0].input_audio.data", "messages.content.input_audio.data"),
    (_msg([{"type": "input_audio", "input_audio": {"data": 12, "format": "wav"}}]),
     "messages[0].content[0].input_audio.data", "messages.content.input_audio.data"),
    (_msg([audio_part(base64.b64encode(b"not an audio file at all").decode())]),
     "messages[0].content[0].input_audio.data", "messages.content.input_audio.data"),
    (_msg([audio_part(b64_wav(np.zeros(100, np.float32), 16000))]),
     "messages[0].content[0].input_audio.data", "messages.content.input_audio.data"),
    (_msg([audio_part(b64_wav(np.full(1600, np.nan, np.float32), 16000))]),
     "messages[0].content[0].input_audio.data", "messages.content.input_audio.data"),
])
def test_refusals_name_the_path(cfg, messages, path, field) -> None:
    with pytest.raises(FieldError) as e:
        render_messages(messages, ByteTokenizer(cfg.ids), cfg)
    assert str(e.value).startswith(f"{path}: "), str(e.value)
    assert e.value.field == field


def test_too_long_a_clip_is_refused(cfg) -> None:
    messages = _msg([{"type": "text", "text": "x"}, audio_part(b64_wav(np.zeros(16000, np.float32), 16000))])
    with pytest.raises(FieldError, match=r"^messages\[0\]\.content\[1\]\.input_audio\.data: is 1\.00 s long"):
        render_messages(messages, ByteTokenizer(cfg.ids), cfg, max_audio_seconds=0.5)


def test_data_uri_prefix(cfg, wave16k) -> None:
    data = b64_wav(wave16k, 16000)
    a = render_messages(_msg([audio_part(data)]), ByteTokenizer(cfg.ids), cfg)
    b = render_messages(_msg([audio_part("data:audio/wav;base64," + data)]), ByteTokenizer(cfg.ids), cfg)
    assert a.prompt_ids == b.prompt_ids and np.array_equal(a.audio[0][0], b.audio[0][0])


@pytest.mark.parametrize("container, fmt", [("WAV", "mp3"), ("WAV", "flac"), ("FLAC", "wav"), ("OGG", "wav"),
                                            ("AIFF", "wav"), ("WAVEX", "ogg")])
def test_data_in_another_container_than_its_format_is_refused(cfg, container, fmt) -> None:
    """The header's container must be the part's `format`: a wav named mp3 (which libsndfile would decode all the
    same) is refused naming the part's data, before a sample is decoded."""
    buf = io.BytesIO()
    sf.write(buf, np.zeros(1600, np.float32), 16000, format=container)
    found = {"WAVEX": "wav"}.get(container, container.lower())
    with pytest.raises(FieldError) as e:
        render_messages(_msg([audio_part(base64.b64encode(buf.getvalue()).decode(), fmt=fmt)]),
                        ByteTokenizer(cfg.ids), cfg)
    assert str(e.value) == f"messages[0].content[0].input_audio.data: holds {found} audio, not {fmt} as its format says"
    assert e.value.field == "messages.content.input_audio.data"


@pytest.mark.parametrize("container, subtype, fmt", [("WAV", "PCM_16", "wav"), ("WAVEX", "PCM_16", "wav"),
                                                     ("FLAC", "PCM_16", "flac"), ("OGG", "VORBIS", "ogg"),
                                                     ("MP3", "MPEG_LAYER_III", "mp3")])
def test_each_format_is_taken_in_its_own_container(cfg, container, subtype, fmt) -> None:
    if container not in sf.available_formats():
        pytest.skip(f"this libsndfile ({sf.__libsndfile_version__}) has no {container}")
    buf = io.BytesIO()
    t = np.arange(4800) / 16000
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, format=container, subtype=subtype)
    out = render_messages(_msg([audio_part(base64.b64encode(buf.getvalue()).decode(), fmt=fmt)]),
                          ByteTokenizer(cfg.ids), cfg)
    assert len(out.audio) == 1 and out.audio[0][1] == 16000 and out.audio[0][0].shape[0] >= 4800


def test_tokenizers(cfg, tmp_path) -> None:
    tok = ByteTokenizer(cfg.ids)
    assert tok.decode([*b"h\xc3\xa9", USER, *b"!"]) == "hé" + "user" + "!"
    assert isinstance(build_chat_tokenizer("bytes", None, cfg.ids), ByteTokenizer)
    assert build_chat_tokenizer("release", tmp_path, cfg.ids) is None  # no tokenizer files: prompt_ids only
    (tmp_path / "vocab.json").write_text(json.dumps({"u": 0, "s": 1, "e": 2, "r": 3, "us": 4, "er": 5, "user": 6,
                                                     "Ċ": 7}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\nu s\ne r\nus er\n")
    release = build_chat_tokenizer("release", tmp_path, cfg.ids)
    assert isinstance(release, ReleaseTokenizer) and release.encode("user\n") == [6, 7]
    assert release.decode([6, 7]) == "user\n"
    whole = tmp_path / "whole"
    whole.mkdir()
    release._tok.save(str(whole / "tokenizer.json"))  # type: ignore[attr-defined]
    assert build_chat_tokenizer("release", whole, cfg.ids).encode("user\n") == [6, 7]  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="tokenizer"):
        build_chat_tokenizer("words", None, cfg.ids)


def test_role_word_apart_gives_the_ids_of_the_whole_piece(cfg, tmp_path) -> None:
    """Qwen2's pre-tokenizer splits the role word from the newline after it, so `[role] + encode("\\n...")` is
    `encode("ROLE\\n...")` with a byte-level BPE that has the role as one token (the release vocab's case)."""
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    merges = [("u", "s"), ("us", "e"), ("use", "r"), ("Ċ", "Ċ"), ("Ġ", "H"), ("ĠH", "i"), ("t", "h")]
    vocab = {c: i for i, c in enumerate(alphabet)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    tok = ReleaseTokenizer.from_dir(tmp_path)
    assert tok.encode("user") == [vocab["user"]]
    for rest in ("\n", "\n\nHi", "\n Hi th", "\n\n\n", "\nuser\n", "\n<think>\n\n</think>\n\nok", "\n 42 é"):
        assert tok.encode("user" + rest) == [vocab["user"], *tok.encode(rest)], repr(rest)
    out = render_messages([{"role": "user", "content": "\n Hi"}], tok, cfg)
    assert out.prompt_ids == (S, USER, *tok.encode("\n\n Hi"), E, *tok.encode("\n"), S, ASSISTANT, *tok.encode("\n"))
