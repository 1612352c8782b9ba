"""OpenAI-shaped chat messages -> Qwen3-Omni's prompt ids and input audio, by the release's chat template.

Owns: reading `messages` (dicts or pydantic models: role "system" / "user" / "assistant"; content a string or
parts `{"type": "text", "text"}` and, in user turns, `{"type": "input_audio", "input_audio": {"data", "format"}}`),
the release template's layout (designs/qwen3_omni_chat.md: no default system prompt; a first system turn, then
every turn as `<|im_start|>ROLE\\n...<|im_end|>\\n`; parts concatenated in order, a clip as `<|audio_start|>`
+ N x `<|audio_pad|>` + `<|audio_end|>` where it stands; an assistant turn's `<think>...</think>` kept only after
the last user query, as Qwen3's template; then the generation prompt `<|im_start|>assistant\\n`), and the ids:
the special tokens and the role words are the config's ids, the text between two of them is one piece for the
tokenizer (as the reference tokenizer splits at special tokens first). Every refusal is a FieldError naming the value's path
(`messages[1].content[0].input_audio.format: ...`; its `field` the path without indices).
Must not know: the thinker, the talker, sampling, the runtime, HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from v2.errors import FieldError
from v2.families.qwen3_omni.chat_audio import decode_input_audio
from v2.families.qwen3_omni.chat_tokenizer import ChatTokenizer
from v2.models.qwen3_omni.config import Qwen3OmniConfig, TokenIds

ROLES = ("system", "user", "assistant")
# the chat layout's special tokens: refused inside a message's text (they would open turns or claim clips)
MARKERS = ("<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_pad|>", "<|audio_end|>", "<|vision_start|>",
           "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
_MISSING = object()

Piece = int | str  # a special token's id, or text for the tokenizer


@dataclass(frozen=True)
class Rendered:
    """The templated prompt: `prompt_ids` with every clip's `<|audio_pad|>` run expanded, and the clips in the
    order of their runs, each (samples [n] float32 mono, rate) at the audio encoder's rate (16 kHz)."""

    prompt_ids: tuple[int, ...]
    audio: list[tuple[np.ndarray, int]]


@dataclass(frozen=True)
class _Turn:
    role: str
    content: list[Piece]  # text and special ids, in order
    text: str | None  # the content as one string (None: it holds a clip); the template's `content is string`
    given_string: bool  # the content was given as a string (the template's last-query rule tests this)
    reasoning: str | None  # an assistant turn's `reasoning_content`, where given


def _get(obj: object, key: str) -> object:
    if isinstance(obj, Mapping):
        return obj.get(key, _MISSING)
    return getattr(obj, key, _MISSING)


def _fail(path: str, field: str, message: str) -> FieldError:
    return FieldError(f"{path}: {message}", field=field)


def _checked_text(value: object, path: str, field: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, field, f"expected a string, got {type(value).__name__}")
    hit = next((m for m in MARKERS if m in value), None)
    if hit is not None:
        raise _fail(path, field, f"contains the special token {hit}, which only the chat template places")
    return value


def _parts(parts: Sequence[object], role: str, at: str, cfg: Qwen3OmniConfig, clips: list[tuple[np.ndarray, int]],
           max_audio_seconds: float | None) -> list[Piece]:
    ids = cfg.ids
    out: list[Piece] = []
    for j, part in enumerate(parts):
        path = f"{at}.content[{j}]"
        kind = _get(part, "type")
        if kind is _MISSING and not isinstance(part, Mapping) and not hasattr(part, "__dict__"):
            raise _fail(path, "messages.content", f"expected a content part object, got {type(part).__name__}")
        if kind == "text":
            out.append(_checked_text(_get(part, "text"), f"{path}.text", "messages.content.text"))
        elif kind == "input_audio":
            if role != "user":
                raise _fail(f"{path}.type", "messages.content.type",
                            f"input_audio parts are taken in user messages only, not in {role} messages")
            audio = _get(part, "input_audio")
            if audio is _MISSING or audio is None:
                raise _fail(f"{path}.input_audio", "messages.content.input_audio",
                            "is missing; expected {\"data\": <base64>, \"format\": \"wav\"}")
            wave, n = decode_input_audio(_get(audio, "data"), _get(audio, "format"), f"{path}.input_audio",
                                         cfg.thinker.audio, max_audio_seconds)
            clips.append((wave, cfg.thinker.audio.sampling_rate))
            out.extend([ids.audio_start, *([ids.audio] * n), ids.audio_end])
        else:
            shown = "missing" if kind is _MISSING else repr(kind)
            allowed = "'text' or 'input_audio'" if role == "user" else "'text'"
            raise _fail(f"{path}.type", "messages.content.type", f"expected {allowed}, got {shown}")
    return out


def _turn(message: object, i: int, cfg: Qwen3OmniConfig, clips: list[tuple[np.ndarray, int]],
          max_audio_seconds: float | None) -> _Turn:
    at = f"messages[{i}]"
    role = _get(message, "role")
    if role is _MISSING:
        if not isinstance(message, Mapping) and not hasattr(message, "__dict__"):
            raise _fail(at, "messages", f"expected a message object with role and content, got {type(message).__name__}")
        raise _fail(f"{at}.role", "messages.role", "is missing; expected 'system', 'user' or 'assistant'")
    if role not in ROLES:
        raise _fail(f"{at}.role", "messages.role", f"expected 'system', 'user' or 'assistant', got {role!r}")
    calls = _get(message, "tool_calls")
    if calls is not _MISSING and calls:
        raise _fail(f"{at}.tool_calls", "messages.tool_calls", "tool calls are not supported")
    content = _get(message, "content")
    if isinstance(content, str):
        text: str | None = _checked_text(content, f"{at}.content", "messages.content")
        pieces: list[Piece] = [content]
        given_string = True
    elif isinstance(content, (list, tuple)):
        pieces = _parts(content, str(role), at, cfg, clips, max_audio_seconds)
        text = "".join(p for p in pieces if isinstance(p, str)) if all(isinstance(p, str) for p in pieces) else None
        given_string = False
    else:
        shown = "missing" if content is _MISSING else type(content).__name__
        raise _fail(f"{at}.content", "messages.content", f"expected a string or a list of parts, got {shown}")
    reasoning = _get(message, "reasoning_content")
    return _Turn(str(role), pieces, text, given_string, reasoning if isinstance(reasoning, str) else None)


def _last_query(turns: list[_Turn]) -> int:
    """The template's `ns.last_query_index`: the last user turn given as a string that is not a tool response;
    the last turn's index when none is."""
    for index in range(len(turns) - 1, -1, -1):
        t = turns[index]
        if t.role == "user" and t.given_string and t.text is not None and not (
                t.text.startswith("<tool_response>") and t.text.endswith("</tool_response>")):
            return index
    return len(turns) - 1


def _assistant(turn: _Turn, index: int, last: bool, last_query: int) -> str:
    """An assistant turn's text after `<|im_start|>assistant`, as Qwen3's template writes it (reasoning split off at
    `</think>`; kept in a think block only after the last user query)."""
    content = turn.text or ""
    reasoning = turn.reasoning or ""
    if turn.reasoning is None and "</think>" in content:
        reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
        content = content.split("</think>")[-1].lstrip("\n")
    if index > last_query and (last or reasoning):
        return f"\n<think>\n{reasoning.strip(chr(10))}\n</think>\n\n{content.lstrip(chr(10))}"
    return f"\n{content}"


def _layout(turns: list[_Turn], ids: TokenIds) -> list[Piece]:
    """The template's output as pieces. A role word is its config id: one token in the release vocab, which the
    pre-tokenizer always splits from the newline after it, so the id placed apart gives the ids of the whole
    piece `ROLE\n...`; and any tokenizer (the seeded card's bytes) gives the role ids the talker looks for."""
    role_ids = {"system": ids.system, "user": ids.user, "assistant": ids.assistant}
    out: list[Piece] = []
    last_query = _last_query(turns)
    for index, turn in enumerate(turns):
        out.extend([ids.im_start, role_ids[turn.role]])
        if turn.role == "assistant":
            out.append(_assistant(turn, index, index == len(turns) - 1, last_query))
        else:
            out.extend(["\n", *turn.content])
        out.extend([ids.im_end, "\n"])
    out.extend([ids.im_start, ids.assistant, "\n"])  # the generation prompt
    return out


def _ids(pieces: list[Piece], tokenizer: ChatTokenizer) -> tuple[int, ...]:
    """Special ids as they are; each run of text between two of them encoded as one piece."""
    out: list[int] = []
    run: list[str] = []
    for p in [*pieces, -1]:
        if isinstance(p, str):
            run.append(p)
            continue
        if run and "".join(run):
            out.extend(int(i) for i in tokenizer.encode("".join(run)))
        run = []
        if p >= 0:
            out.append(p)
    return tuple(out)


def render_messages(messages: object, tokenizer: ChatTokenizer, config: Qwen3OmniConfig, *,
                    max_audio_seconds: float | None = None) -> Rendered:
    """`messages` -> the prompt ids (generation prompt appended) and the clips their audio runs stand for.
    `max_audio_seconds`: the longest clip taken (as given, before resampling); None: no bound here."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise _fail("messages", "messages", f"expected a list of messages, got {type(messages).__name__}")
    if not messages:
        raise _fail("messages", "messages", "is empty; at least one message is needed")
    clips: list[tuple[np.ndarray, int]] = []
    turns = [_turn(m, i, config, clips, max_audio_seconds) for i, m in enumerate(messages)]
    return Rendered(_ids(_layout(turns, config.ids), tokenizer), clips)
