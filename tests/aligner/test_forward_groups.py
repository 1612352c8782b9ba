"""The aligner's work kind on a CPU: the spans of a batch run in groups of like prompt length (`forward_groups`),
each group one forward, and the classes come back span by span exactly as one forward of them all gives them
(each span as alone); short and long spans do not share a forward (its padding would cost more than the call
it saves); a GPU keeps one forward (not run here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.aligner.card import resolve_aligner
from v2.aligner.executor import FIXED_ROWS, AlignExecutor, forward_groups
from v2.aligner.loop import Span, align_kind
from v2.aligner.service import Aligner
from v2.contracts import ShapeSignature, WorkPlan
from v2.runtime.scheduler import Batch


def cost(lengths: list[int], groups: list[list[int]]) -> int:
    return sum(FIXED_ROWS ** 2 + len(g) * max(lengths[i] for i in g) ** 2 for g in groups)


def test_groups_cover_every_span_once_sorted_by_length_and_cost_least() -> None:
    assert forward_groups([]) == []
    assert forward_groups([7]) == [[0]]
    assert forward_groups([100, 100, 100]) == [[0, 1, 2]]  # no padding: one call saves two fixed costs
    assert forward_groups([10, 400]) == [[0], [1]]          # the short one padded to 400 rows costs more
    lengths = [222, 255, 115, 287, 70, 80, 58, 246, 193, 222, 109, 199, 69, 173, 132, 190]
    groups = forward_groups(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(g == sorted(g) for g in groups)
    assert all(max(lengths[i] for i in a) <= min(lengths[i] for i in b) for a, b in zip(groups, groups[1:]))
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    for k in (1, 2, 3, 4, len(lengths)):  # every split into equal runs costs at least as much
        assert cost(lengths, groups) <= cost(lengths, [order[i:i + k] for i in range(0, len(lengths), k)])


@pytest.fixture(scope="module")
def aligner() -> Aligner:
    return Aligner.load(resolve_aligner("forced_aligner_tiny"), "cpu")


def span(aligner: Aligner, index: int, words: list[str], seconds: float, seed: int) -> Span:
    audio = np.random.default_rng(seed).standard_normal(int(24000 * seconds)).astype(np.float32) * 0.1
    ids = tuple(tuple(aligner.tokenize(w)) for w in words)
    return Span(index, None, None, tuple(words), ids, audio, 24000, 0.0, audio.shape[0] / 24000)


@pytest.mark.exact
def test_short_and_long_spans_run_apart_and_their_classes_are_one_forwards(aligner: Aligner,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    spans = [span(aligner, 0, ["a", "long", "sentence", "of", "many", "words", "spoken", "here"] * 4, 1.5, 1),
             span(aligner, 1, ["hi"], 0.5, 2), span(aligner, 2, [], 0.5, 3),
             span(aligner, 3, ["one", "more", "fairly", "long", "line", "of", "text"] * 4, 1.2, 4),
             span(aligner, 4, ["ok", "yes"], 0.4, 5)]
    kind = align_kind("aligner")
    batch = Batch(kind, tuple(WorkPlan(i, "aligner", ShapeSignature(kind, "span"), s) for i, s in enumerate(spans)),
                  len(spans))
    executor = AlignExecutor(aligner)
    packed = executor.pack(batch)
    model = aligner.model
    calls: list[int] = []
    real = model.marker_classes

    def counted(prompts: list[torch.Tensor], mels: list[torch.Tensor]) -> torch.Tensor:
        calls.append(len(prompts))
        return real(prompts, mels)

    monkeypatch.setattr(model, "marker_classes", counted)
    with torch.inference_mode():
        grouped = executor.launch(packed)
        assert sorted(calls) == [2, 2]  # the two long spans together, the two short ones together
        monkeypatch.setattr("v2.aligner.executor.forward_groups", lambda lengths: [list(range(len(lengths)))])
        whole = executor.launch(packed)
    assert calls[2:] == [4]
    assert grouped.dtype == torch.int64 and torch.equal(grouped, whole)
    assert grouped.shape[0] == 2 * sum(len(s.words) for s in spans)
    rows = executor.read(grouped, batch)
    assert [len(r.words) for r in rows] == [len(s.words) for s in spans]
