"""What two or more family packages check alike at submit, written once: the frame budget of a request, the
checks of a group that shares one prompt, a head's sampling over the card's, the refusals of an open request every text family makes, and the
seeded-checkpoint rules of a card.

Owns: `frame_budget` (a request's `max_frames` or the default, against the card's cap, and `min_frames`
against it), `shared_prompt` / `check_one_segment` (one prompt for every request of a group, saying all
its text), `over` (one head's sampling: the request's knobs over the card's), `check_open` (an open request: no rollout, a tokenizer for its pieces), `check_seeded` (a card's
`bytes` tokenizer only with seeded weights; seeded weights name their codec's checkpoint).
Must not know: the engine, devices, any family's model, prompt layout or request type (it reads the fields
named here and nothing else).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from v2.card import SEED_PREFIX
from v2.contracts import ExecutionProfile
from v2.errors import RequestError
from v2.sampling_settings import HeadSampling


def frame_budget(requested: int | None, cap: int, default: int, min_frames: int | None = None) -> int:
    """The request's frame budget: `requested`, else `default`; refused over the card's `cap` (naming
    `max_frames`) or below `min_frames` (naming `min_frames`, where the family takes one)."""
    max_frames = requested if requested is not None else default
    if max_frames > cap:
        raise RequestError(f"max_frames: {max_frames} exceeds the card's cap ({cap})", field="max_frames")
    if min_frames is not None and min_frames > max_frames:
        raise RequestError(f"min_frames: {min_frames} exceeds max_frames ({max_frames})", field="min_frames")
    return max_frames


def shared_prompt(group: Sequence[tuple[Any, Any]], check_size: Callable[[Sequence[tuple[Any, Any]]], None],
                  same: Callable[[Any, Any], bool] | None = None) -> Any:
    """A group's (request, prepared) pairs that share one prompt, checked: `check_size` (the paged family's
    `check_group_size`), then one prompt for all: the same `rows` (and `same(p, first)` where the family lays
    out more than rows). Returns the first's prepared."""
    import torch  # here, not at the top: a card module imports this one, and `v2 cards` loads no torch

    check_size(group)
    prepared = [p for _, p in group]
    first = prepared[0]
    if any(not torch.equal(p.rows, first.rows) or (same is not None and not same(p, first)) for p in prepared):
        raise ValueError("prompts: a shared prompt must be the same for every request of the group")
    return first


def over(base: HeadSampling, temperature: float | None, top_k: int | None, top_p: float | None) -> HeadSampling:
    """One head's sampling: each knob the request gives over `base`'s (the card's)."""
    return HeadSampling(base.temperature if temperature is None else temperature, base.top_k if top_k is None else top_k,
                        base.top_p if top_p is None else top_p)


def check_one_segment(prepared: Any) -> None:
    """A group's shared prompt says all its text: a long text spoken as several `segments` is refused naming
    `text`."""
    if len(prepared.segments) > 1:
        raise RequestError(f"text: a group shares one prompt; this text is spoken as {len(prepared.segments)} "
                           "segments (max_segment_chars)", field="text")


def check_open(request: Any, tokenizer: Any, files: str) -> None:
    """An open request (its text arrives while it runs): not a rollout, and a tokenizer for its pieces (`files`:
    the tokenizer files the checkpoint lacks, as the refusal names them)."""
    if request.profile is ExecutionProfile.ROLLOUT:
        raise RequestError("profile: a rollout's prompt is given whole (rt.rollout); an open request's text "
                           "arrives while it runs", field="profile")
    if tokenizer is None:
        raise RequestError(f"text: this checkpoint has no tokenizer ({files}); an open request's pieces are text",
                           field="text")


def check_seeded(tokenizer: str, checkpoint: str, codec_checkpoint: str | None, expert: str, no_codec: str) -> None:
    """A card's rules for seeded weights (`checkpoint` "seed:NAME"): the `bytes` tokenizer is theirs alone, and
    they hold no codec, so the card names the codec's checkpoint (`expert`: the expert's name in the card;
    `no_codec`: what the seeded weights lack, as the refusal says it)."""
    seeded = checkpoint.startswith(SEED_PREFIX)
    if tokenizer == "bytes" and not seeded:
        raise ValueError(f"experts.{expert}.tokenizer: 'bytes' is for seeded weights; a release uses 'release'")
    if codec_checkpoint is None and seeded:
        raise ValueError(f"experts.codec.checkpoint: {no_codec}; name the codec's checkpoint")
