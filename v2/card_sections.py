"""The card schema's plain sections: `_Frozen` (the frozen base of every card model, a family's sections
included), `SeededWeights` (a `[seeded.*]` table), `HeadDefaults` / `StageSampling` / `SamplingDefaults`
(sampling defaults), `RuntimeSettings` (a card's `[runtime]`), `check_buckets` (a batch-bucket list's check),
`DType`. v2/card.py re-exports every name.
Must not know: loops and the graph they declare (card_loops.py), finding or loading a card, families, the
runtime.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from v2.fields import TOP_K_MAX, check_penalty, check_temperature
from v2.sampling_settings import HeadSampling, SamplingSettings

DType = Literal["float32", "bfloat16", "float16"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class SeededWeights(_Frozen):
    """Weights drawn from `seed` for a model built from `config` (a config.json in the release schema)."""

    seed: int
    config: dict[str, Any]


class HeadDefaults(_Frozen):
    temperature: float = Field(ge=0, allow_inf_nan=False)  # 0 (greedy) or in the range requests may set
    top_k: int = Field(ge=0, le=TOP_K_MAX)
    top_p: float = Field(gt=0, le=1)

    _temperature = field_validator("temperature")(check_temperature)


class StageSampling(HeadDefaults):
    """One stage's sampling defaults (a family whose card names its stages): temperature (0 = greedy), top_k,
    top_p."""


class SamplingDefaults(_Frozen):
    stop: HeadDefaults
    audio: HeadDefaults
    repetition_penalty: float = Field(gt=0, allow_inf_nan=False)

    _penalty = field_validator("repetition_penalty")(check_penalty)

    def settings(self) -> SamplingSettings:
        """The defaults as `SamplingSettings`."""
        return SamplingSettings(
            stop=HeadSampling(self.stop.temperature, self.stop.top_k, self.stop.top_p),
            audio=HeadSampling(self.audio.temperature, self.audio.top_k, self.audio.top_p),
            repetition_penalty=self.repetition_penalty,
        )


def check_buckets(buckets: list[int]) -> list[int]:
    if not buckets or any(b < 1 for b in buckets) or buckets != sorted(set(buckets)):
        raise ValueError("must be a non-empty, strictly increasing list of positive integers")
    return buckets


class RuntimeSettings(_Frozen):
    # intra-op threads of the engine thread when the experts run on a CPU (None: torch's default)
    cpu_threads: int | None = Field(default=None, ge=1)
    # where stored voices live (None: $XDG_CACHE_HOME/v2/voices/<card name>)
    voices_dir: str | None = None
    # an open request (Runtime.open) that gets no text for this long ends (abort, the reason in its error)
    input_idle_timeout_s: float = Field(default=30.0, gt=0, le=86400, allow_inf_nan=False)
