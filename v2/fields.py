"""Strict conversion of request values: one converter for every integer array field, and strict scalars.

Owns: turning a list / numpy array / tensor into a fresh int64 CPU tensor (a copy: nothing the caller holds
is ever read again) or refusing it with a `FieldError` that names the field and, where it can, the row; the
scalar rules (a bool is not a number, a numeric string is not a number, bytes are not text, text must be
encodable: `encoding_problem`) as pydantic-ready annotated types; the accepted sampling ranges; the bounds on
a reference recording's sample rate and decoded size (one rule, used by the request before it copies raw samples and by
the audio reader before it decodes or converts anything); the sampling knobs as annotated types
(`Temperature`, `TopK`, `TopP`, `Penalty`), which every family's request schema uses; a field of token ids
(`TokenIds`: a list, tuple, 1-D array or tensor of ids, at most `MAX_IDS`); a request schema's config
(`StrictRequest`), the fields every family's request ends with (`RequestTail`) and a text's character cap
(`check_text_chars`).
Must not know: the model, cards, the engine.
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
from typing import Annotated, Any, Iterable, Literal, Self

import numpy as np
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from v2.contracts import ExecutionProfile
from v2.errors import FieldError as FieldError  # raised here (re-exported); its home is v2/errors.py
from v2.errors import RequestError

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

# Sampling values a request or a card may set (temperature 0 means greedy). A temperature divides the logits,
# so the last-bit difference between the sampler's logits (cached decode) and the teacher-forced recompute's
# (one full pass) reaches a logprob as ~1e-6 / T: 9.5e-6 measured at 0.1, 3.3e-6 at 0.25, so 0.25 keeps every
# accepted setting within 1e-5 with margin (the reference demo's floor is 0.1). Penalties are the demo's
# [0.8, 2]: 1e-40 multiplied logits into inf and NaN.
TEMPERATURE_MIN, TEMPERATURE_MAX = 0.25, 3.0
PENALTY_MIN, PENALTY_MAX = 0.8, 2.0
TOP_K_MAX = 2**31 - 1  # the kernels hold top-k in 32 bits; any k above the codebook keeps everything

# Reference recordings: what one may cost is decided from a file's header (frames, rate, channels) or an
# array's shape, before anything is decoded, converted or copied. The rate range spans telephone audio to
# studio masters (the codec runs at 24 or 48 kHz; a rate outside it is a mistake or a crafted header). The
# decoded size bounds samples x channels: 2**24 is 64 MiB as float32, room for 30 s of 192 kHz stereo or of
# 8 channels at 48 kHz, while the card's max_reference_seconds bounds the duration.
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 8_000, 192_000  # Hz
MAX_REFERENCE_SAMPLES = 2**24  # frames x channels of one recording, as given (before resampling)


def is_tensor(value: Any) -> bool:
    """A torch tensor, told without importing torch (a caller who has one has loaded torch already)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def int_tensor(value: Any, field: str, label: str | None = None) -> Any:
    """A new int64 CPU tensor holding `value`'s integers (every integer dtype whose values fit int64);
    refuses floats, bools, complex, object arrays, sparse or meta tensors, ragged lists and non-integer
    elements with a `FieldError` of `field`, its message naming `label` (default: the field) and the row."""
    import torch  # the result is a tensor

    where = label or field
    if isinstance(value, torch.Tensor):
        return _from_tensor(value, field, where)
    if isinstance(value, np.ndarray):
        return _from_numpy(value, field, where)
    if isinstance(value, (list, tuple)):
        flat: list[int] = []
        shape = _walk(value, field, where, flat, 0)
        return torch.tensor(flat, dtype=torch.int64).reshape(shape)
    raise FieldError(f"{where}: expected a list, numpy array or tensor of integers, got {type(value).__name__}",
                     field=field)


@functools.cache
def _int_dtypes() -> frozenset[Any]:
    import torch

    return frozenset({torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
                      torch.uint64})


def _from_tensor(t: Any, field: str, where: str) -> Any:
    import torch

    if t.layout is not torch.strided:
        raise FieldError(f"{where}: sparse tensors are not accepted; give a dense integer tensor", field=field)
    if t.is_meta:
        raise FieldError(f"{where}: a meta tensor holds no values", field=field)
    if t.dtype not in _int_dtypes():
        raise FieldError(f"{where}: expected an integer dtype, got {t.dtype}", field=field)
    if t.dtype in (torch.uint16, torch.uint32, torch.uint64):  # torch has few ops for these: numpy checks them
        return _from_numpy(t.detach().cpu().numpy(), field, where)
    return t.detach().to(device="cpu", dtype=torch.int64, copy=True).contiguous()


def _from_numpy(a: np.ndarray, field: str, where: str) -> Any:
    import torch

    if a.dtype.kind not in "iu":
        kind = {"b": "bool", "f": "floating", "c": "complex", "O": "object"}.get(a.dtype.kind, str(a.dtype))
        raise FieldError(f"{where}: expected an integer dtype, got {kind} ({a.dtype})", field=field)
    if a.dtype.kind == "u" and a.dtype.itemsize == 8 and a.size and int(a.max()) > INT64_MAX:
        raise FieldError(f"{where}: values must fit in int64 (the largest is {int(a.max())})", field=field)
    return torch.from_numpy(np.array(a, dtype=np.int64, order="C", copy=True))  # widened copy, any strides


def _walk(value: Any, field: str, where: str, flat: list[int], depth: int) -> tuple[int, ...]:
    """Append the integers of a nested list to `flat`; the nesting's shape (refusing ragged nesting)."""
    if depth > 8:
        raise FieldError(f"{where}: nested too deep", field=field)
    if not value:
        return (0,)
    inner: tuple[int, ...] | None = None
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        if isinstance(item, (list, tuple)):
            shape = _walk(item, field, at, flat, depth + 1)
        elif (isinstance(item, np.ndarray) or is_tensor(item)) and item.ndim > 0:
            converted = int_tensor(item, field, at)
            flat.extend(converted.reshape(-1).tolist())
            shape = tuple(converted.shape)
        else:
            flat.append(_int_item(item, field, at))
            shape = ()
        if inner is None:
            inner = shape
        elif shape != inner:
            raise FieldError(f"{where}: ragged nesting ({at} has shape {list(shape)}, the first has {list(inner)})",
                             field=field)
    assert inner is not None
    return (len(value), *inner)


def _int_item(item: Any, field: str, where: str) -> int:
    if isinstance(item, (bool, np.bool_)):
        raise FieldError(f"{where}: expected an integer, got a bool", field=field)
    if isinstance(item, np.ndarray) and item.ndim == 0:
        item = item[()]
    if is_tensor(item) and item.ndim == 0 and item.dtype in _int_dtypes():
        item = int(item)
    elif isinstance(item, np.generic) and item.dtype.kind in "iu":
        item = int(item)
    if not isinstance(item, int):
        raise FieldError(f"{where}: expected an integer, got {type(item).__name__}", field=field)
    if not INT64_MIN <= item <= INT64_MAX:
        raise FieldError(f"{where}: {shown(item)} does not fit in int64", field=field)
    return item


def shown(value: Any) -> str:
    """repr(value) cut to 60 characters, or a stand-in for an integer too long to print (str() of 4,300+ digits
    raises)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and abs(int(value)) > 10**30:
        digits = int(int(abs(value)).bit_length() * 0.30103)
        return f"{'a negative' if value < 0 else 'an'} integer of about {digits} digits"
    try:
        text = repr(value)
    except ValueError:  # e.g. a Fraction of a huge integer
        return f"a {type(value).__name__} too long to print"
    return text if len(text) <= 60 else text[:57] + "..."


def check_sample_rate(value: Any) -> int:
    """A recording's sample rate as an int in [MIN_SAMPLE_RATE, MAX_SAMPLE_RATE] Hz, or ValueError saying why
    (never OverflowError: a huge integer is compared, not converted to float)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"sample rate must be a positive whole number of Hz, got {shown(value)}")
    if isinstance(value, numbers.Integral):
        rate = int(value)
    else:
        try:
            f = float(value)
        except (OverflowError, ValueError):
            f = math.inf
        if not math.isfinite(f) or not f.is_integer():
            raise ValueError(f"sample rate must be a positive whole number of Hz, got {shown(value)}")
        rate = int(f)
    if rate <= 0:
        raise ValueError(f"sample rate must be a positive whole number of Hz, got {shown(value)}")
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise ValueError(f"sample rate must lie in [{MIN_SAMPLE_RATE}, {MAX_SAMPLE_RATE}] Hz, got {shown(value)}")
    return rate


def check_reference_size(frames: int, channels: int) -> None:
    """ValueError when frames x channels exceeds MAX_REFERENCE_SAMPLES (what decoding would hold)."""
    if frames * channels > MAX_REFERENCE_SAMPLES:
        raise ValueError(f"holds {frames:,} frames x {channels} channels = {frames * channels:,} samples; at most "
                         f"{MAX_REFERENCE_SAMPLES:,} samples x channels are accepted")


# ----- scalars ---------------------------------------------------------------------------------------
def _strict_int(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        raise ValueError("expected an integer, got a bool")
    if isinstance(v, numbers.Integral):
        return int(v)
    raise ValueError(f"expected an integer, got {type(v).__name__}")


def _strict_float(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        raise ValueError("expected a number, got a bool")
    if isinstance(v, numbers.Real):
        try:
            return float(v)
        except OverflowError:  # an integer beyond float's range
            raise ValueError(f"{shown(v)} is beyond the range of a float") from None
    raise ValueError(f"expected a number, got {type(v).__name__}")


def _strict_bool(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise ValueError(f"expected true or false, got {type(v).__name__}")


def encoding_problem(text: str) -> str | None:
    """Why `text` cannot be encoded as UTF-8 (a lone surrogate, and where), or None when it can. ASCII (the
    common case) holds no surrogate: a long text is not copied to find out."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            return f"character {e.start} is a lone surrogate, which cannot be encoded as UTF-8"
    return None


def _strict_text(v: Any) -> Any:
    if not isinstance(v, str):
        raise ValueError(f"expected text (str), got {type(v).__name__}")
    if (why := encoding_problem(v)) is not None:
        raise ValueError(why)
    return v


StrictInt = Annotated[int, BeforeValidator(_strict_int)]
StrictFloat = Annotated[float, BeforeValidator(_strict_float)]
StrictBool = Annotated[bool, BeforeValidator(_strict_bool)]
StrictText = Annotated[str, BeforeValidator(_strict_text)]


def check_temperature(v: float | None) -> float | None:
    """0 (greedy) or a value in [TEMPERATURE_MIN, TEMPERATURE_MAX]."""
    if v is not None and v != 0 and not TEMPERATURE_MIN <= v <= TEMPERATURE_MAX:
        raise ValueError(f"must be 0 (greedy) or lie in [{TEMPERATURE_MIN}, {TEMPERATURE_MAX}], got {v!r}")
    return v


def check_penalty(v: float | None) -> float | None:
    if v is not None and not PENALTY_MIN <= v <= PENALTY_MAX:
        raise ValueError(f"must lie in [{PENALTY_MIN}, {PENALTY_MAX}] (1 = off), got {v!r}")
    return v


Temperature = Annotated[StrictFloat | None, AfterValidator(check_temperature)]
TopK = Annotated[StrictInt | None, Field(ge=0, le=TOP_K_MAX)]
TopP = Annotated[StrictFloat | None, Field(gt=0, le=1)]
Penalty = Annotated[StrictFloat | None, AfterValidator(check_penalty)]


# ----- token ids -------------------------------------------------------------------------------------
MAX_IDS = 100_000  # token ids in one field (bounded before anything else reads them)


def token_ids(v: Any) -> Any:
    """A list, tuple, 1-D array or tensor of ids -> a list (bounded in length first); None stays None."""
    if v is None or isinstance(v, list):
        items = v
    elif isinstance(v, tuple):
        items = list(v)
    elif hasattr(v, "tolist") and getattr(v, "ndim", 1) == 1:
        items = v.tolist()
    else:
        raise ValueError(f"expected a list of token ids, got {type(v).__name__}")
    if items is not None and len(items) > MAX_IDS:
        raise ValueError(f"{len(items)} ids, over {MAX_IDS}")
    return items


TokenIds = Annotated[list[Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]] | None, BeforeValidator(token_ids)]


# ----- a request schema's common parts ---------------------------------------------------------------
class StrictRequest(BaseModel):
    """The config of a family's request schema and its parts: frozen, unknown fields refused, any value type
    allowed (arrays, tensors), and an instance validated again when given (one made by
    model_copy(update=...) or model_construct() is checked, its arrays copied again)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True, revalidate_instances="always")


class RequestTail(StrictRequest):
    """The fields every family's request ends with: the seed, the frame limits (what a frame counts is the
    family's), streaming, the profile, whether audio is decoded, the timeout, word timestamps. A family's
    request class is `class XRequest(RequestTail, XFields)`, its own fields in `XFields` (a `StrictRequest`): pydantic orders
    fields from the last base to the first, so these come after the family's own, and the first field a
    refusal names is the first in the family's order."""

    seed: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] = 0
    max_frames: Annotated[StrictInt | None, Field(ge=1, le=INT64_MAX)] = None  # frames at most
    min_frames: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] = 0  # frames before a stop may end it
    stream: StrictBool = False
    profile: ExecutionProfile = ExecutionProfile.SERVE
    decode_audio: StrictBool = True  # False: codes (and, under ROLLOUT, the trajectory) only, no codec work
    timeout: Annotated[StrictFloat | None, Field(gt=0, le=86400)] = None  # seconds from submit; then "abort"
    # "word": each word's start and end (`SpeechResult.words`, events per sentence), from the runtime's aligner
    # (an added loop, v2/aligner/); refused naming `timestamps` by a runtime without one
    timestamps: Literal["word"] | None = None

    def checked_stream(self) -> Self:
        """This request, or refused naming `stream` when it streams without decoding audio (a family's model
        validator ends with it, after its own checks)."""
        if self.stream and not self.decode_audio:
            raise FieldError("stream: a stream needs decode_audio", field="stream")
        return self


def check_text_chars(texts: Iterable[tuple[str, str | None]], cap: int) -> None:
    """Cheap bounds first: a text (field name, text or None) over the card's character cap (`max_text_chars`)
    is refused naming its field, before any tokenising."""
    for name, value in texts:
        if value is not None and len(value) > cap:
            raise RequestError(f"{name}: {len(value)} characters, over the card's max_text_chars ({cap})", field=name)
