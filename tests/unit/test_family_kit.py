"""v2/kit/checks.py: the submit checks the family packages share, each refusal naming its field."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from v2.contracts import ExecutionProfile
from v2.errors import RequestError
from v2.kit.checks import check_one_segment, check_open, check_seeded, frame_budget, over, shared_prompt
from v2.sampling_settings import HeadSampling


def test_frame_budget_takes_the_request_s_else_the_default_and_names_the_field_it_refuses():
    assert frame_budget(None, 100, 40) == 40
    assert frame_budget(70, 100, 40, min_frames=70) == 70
    with pytest.raises(RequestError, match=r"max_frames: 101 exceeds the card's cap \(100\)") as e:
        frame_budget(101, 100, 40)
    assert e.value.field == "max_frames"
    with pytest.raises(RequestError, match=r"min_frames: 41 exceeds max_frames \(40\)") as e:
        frame_budget(None, 100, 40, min_frames=41)
    assert e.value.field == "min_frames"
    assert frame_budget(None, 100, 40, min_frames=None) == 40  # a family without min_frames


def _prepared(rows: list[int], trailing: tuple[int, ...] = (), segments: int = 1) -> SimpleNamespace:
    return SimpleNamespace(rows=torch.tensor(rows), trailing=trailing, segments=(None,) * segments)


def test_a_shared_prompt_checks_the_group_size_first_then_every_prompt_alike():
    sized: list[int] = []
    group = [(None, _prepared([1, 2])), (None, _prepared([1, 2]))]
    assert shared_prompt(group, lambda g: sized.append(len(g))) is group[0][1]
    assert sized == [2]
    with pytest.raises(ValueError, match="prompts: a shared prompt must be the same"):
        shared_prompt([(None, _prepared([1, 2])), (None, _prepared([1, 3]))], lambda g: None)
    differ = [(None, _prepared([1], (1,))), (None, _prepared([1], (2,)))]  # rows alike, trailing text not
    shared_prompt(differ, lambda g: None)
    with pytest.raises(ValueError, match="prompts"):
        shared_prompt(differ, lambda g: None, lambda p, first: p.trailing == first.trailing)

    def too_many(group: object) -> None:
        raise ValueError("n: too many")

    with pytest.raises(ValueError, match="n: too many"):  # the size check comes before the prompts'
        shared_prompt([(None, _prepared([1])), (None, _prepared([2]))], too_many)


def test_a_shared_prompt_says_all_its_text():
    check_one_segment(_prepared([1]))
    with pytest.raises(RequestError, match="spoken as 3 segments") as e:
        check_one_segment(_prepared([1], segments=3))
    assert e.value.field == "text"


def test_an_open_request_is_no_rollout_and_needs_a_tokenizer():
    check_open(SimpleNamespace(profile=ExecutionProfile.SERVE), object(), "no tokenizer.json")
    with pytest.raises(RequestError, match="rollout") as e:
        check_open(SimpleNamespace(profile=ExecutionProfile.ROLLOUT), object(), "no tokenizer.json")
    assert e.value.field == "profile"
    with pytest.raises(RequestError, match=r"no tokenizer \(no tokenizer.json\)") as e:
        check_open(SimpleNamespace(profile=ExecutionProfile.SERVE), None, "no tokenizer.json")
    assert e.value.field == "text"


def test_seeded_weights_alone_take_bytes_and_name_their_codec():
    check_seeded("bytes", "seed:tiny", "seed:codec", "model", "x")
    check_seeded("release", "org/model", None, "model", "x")
    with pytest.raises(ValueError, match="experts.talker.tokenizer: 'bytes' is for seeded weights"):
        check_seeded("bytes", "org/model", None, "talker", "x")
    with pytest.raises(ValueError, match="experts.codec.checkpoint: seeded weights hold none; name the codec's"):
        check_seeded("bytes", "seed:tiny", None, "model", "seeded weights hold none")


def test_a_head_s_sampling_takes_each_knob_the_request_gives():
    base = HeadSampling(0.9, 50, 0.95)
    assert over(base, None, None, None) == base
    assert over(base, 0.0, None, 0.5) == HeadSampling(0.0, 50, 0.5)
