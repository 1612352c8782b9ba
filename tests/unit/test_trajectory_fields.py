"""A trajectory's common record holds no family's fields: a family adds its own in a subclass, which
`to_dict` writes like the rest; `collate` takes its widths from the trajectories (none from an empty batch)."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

import numpy as np

from v2.rl.trajectory import Trajectory, collate
from v2.sampling_settings import SamplingSettings


@dataclass(frozen=True)
class ExtraTrajectory(Trajectory):
    extra_ids: np.ndarray | None = None


def make(cls: type = Trajectory, frames: int = 3, groups: int = 4, **extra: object) -> Trajectory:
    return cls(request_id=1, group_id=0, sample_id=0, seed=7, weight_version=0,
               prompt_rows=np.zeros((2, groups + 1), dtype=np.int64),
               codes=np.arange(frames * groups, dtype=np.int64).reshape(frames, groups),
               stop_decisions=np.zeros(frames, dtype=bool), logprobs=np.full((frames, groups), -0.5, np.float32),
               stop_logprob=None, sampling=SamplingSettings(), min_frames=0, finish_reason="length",
               family="some_family", **extra)


def test_the_common_record_has_no_family_specific_field():
    names = {f.name for f in fields(Trajectory)}
    assert {"codes", "logprobs", "family", "prompt_rows"} <= names
    assert not names & {"trailing", "speaker_vector"}


def test_a_subclass_field_is_written_by_to_dict():
    t = make(ExtraTrajectory, extra_ids=np.array([5, 6], dtype=np.int64))
    d = json.loads(json.dumps(t.to_dict()))
    assert d["extra_ids"] == [5, 6] and d["codes"][1] == [4, 5, 6, 7] and "audio" not in d
    assert json.loads(json.dumps(make().to_dict()))["family"] == "some_family"


def test_collate_takes_its_widths_from_the_trajectories():
    out = collate([make(groups=4), make(frames=2, groups=4)])
    assert out["codes"].shape == (2, 3, 4) and out["logprobs"].shape == (2, 3, 4)
    assert out["mask"][1].sum() == 2 * 4 and out["lengths"].tolist() == [3, 2]
    empty = collate([])
    assert empty["codes"].shape == (0, 0, 0) and empty["logprobs"].shape == (0, 0, 0)
