"""The rollout pool drives every family's card (each family of the registry, by its tiny card:
tests/tiny_cards.py): it is sized by the card's driven AR loop (whatever the family names it), and a replica's
trajectories equal a single runtime's, codes and logprobs, on a real local Ray."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="the cluster tests need Ray: pip install -e \".[ray,server]\"")

import numpy as np  # noqa: E402

from tiny_cards import tiny_cards  # noqa: E402
from v2.card import load_card  # noqa: E402
from v2.cluster import RolloutPool  # noqa: E402
from v2.cluster.pool import decode_limits  # noqa: E402
from v2.runtime import Runtime  # noqa: E402

CARDS = list(tiny_cards().values())


@pytest.mark.parametrize("card", CARDS)
def test_a_pool_of_any_family_gives_a_single_runtimes_trajectories(ray_cluster, card: str) -> None:
    limits = decode_limits(load_card(card))
    assert limits.max_running >= 1 and limits.max_frames >= 1
    prompts = ["A pool of another family.", "Its second prompt."]
    options = dict(n=2, seed=5, max_frames=6)
    with RolloutPool.from_card(card, replicas=1, resources_per_replica={"num_cpus": 0.5}) as pool:
        got = pool.rollout(prompts, **options).trajectories(120)
    with Runtime.from_card(card, device="cpu") as rt:
        want = rt.rollout(prompts, **options).trajectories(120)
    assert len(got) == len(want) == 4
    for a, b in zip(got, want):
        assert (a.group_id, a.sample_id, a.seed, a.finish_reason) == (b.group_id, b.sample_id, b.seed, b.finish_reason)
        assert a.family == b.family == load_card(card).family
        assert np.array_equal(a.codes, b.codes)
        assert np.array_equal(a.logprobs, b.logprobs)
