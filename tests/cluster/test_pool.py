"""The rollout pool on a real local Ray cluster with 2 CPU replicas of the tiny card: trajectories equal a
single runtime's, groups follow outstanding work, weight versions order rollouts, and a killed replica costs
no trajectory and comes back holding the current weights."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="the cluster tests need Ray: pip install -e \".[ray,server]\"")

import numpy as np  # noqa: E402

from .kit import CARD, scaled_weights, wait_for  # noqa: E402
from v2.cluster import RolloutCancelled, RolloutPool  # noqa: E402
from v2.errors import RequestError  # noqa: E402
from v2.runtime import Runtime  # noqa: E402
from v2.runtime.weight_updates import WeightUpdateError  # noqa: E402

PROMPTS = ["A short sentence to speak.", "Another prompt, a little longer than the first one."]
MORE = PROMPTS + ["A third prompt for the pool.", "And a fourth one, to keep both replicas busy."]
# No top-k / top-p cut where batches differ: a 1e-7 change in a logit can move a token across a cut and
# renormalise the kept ones by percents (same code drawn, different logprob); without a cut the bound holds.
UNCUT = dict(temperature=1.0, top_k=0, top_p=1.0)


@pytest.fixture(scope="module")
def pool(ray_cluster):
    with RolloutPool.from_card(CARD, replicas=2, resources_per_replica={"num_cpus": 0.5}, max_restarts=2) as p:
        yield p


@pytest.fixture(scope="module")
def single():
    """The same card in this process: every weight update the pool gets, it gets too."""
    with Runtime.from_card(CARD, device="cpu") as rt:
        yield rt


def push(pool, single, factor: float, **kw) -> int:
    version = pool.weight_version + 1
    tensors = scaled_weights(factor)
    pool.update_weights(tensors, version, **kw)
    single.update_weights(tensors, version)
    return version


def alone(single, prompts, **options):
    """What the single runtime gives when each prompt's group runs by itself (the batch a replica ran),
    seeded by its index in the whole rollout."""
    return [t for g, p in enumerate(prompts)
            for t in single.rollout([p], first_prompt_index=g, **options).trajectories(120)]


def assert_same(got, want, *, exact: bool) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a.group_id, a.sample_id, a.seed, a.weight_version, a.finish_reason) == \
            (b.group_id, b.sample_id, b.seed, b.weight_version, b.finish_reason)
        assert np.array_equal(a.codes, b.codes) and np.array_equal(a.stop_decisions, b.stop_decisions)
        assert np.array_equal(a.prompt_rows, b.prompt_rows)
        if exact:
            assert np.array_equal(a.logprobs, b.logprobs) and a.stop_logprob == b.stop_logprob
        else:  # other rows in the batch change fp32 reduction order: the runtime's own batched-vs-alone bound
            assert (a.sampling.audio.top_k, a.sampling.audio.top_p) == (0, 1.0)  # (see UNCUT)
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5, rtol=0)


@pytest.mark.exact
def test_trajectories_equal_a_single_runtime_whichever_replica_runs_them(pool, single):
    options = dict(n=4, seed=7, max_frames=24, **UNCUT)
    batch = pool.rollout(PROMPTS, **options)
    got = batch.trajectories(120)
    assert batch.placements == [[0], [1]]  # both idle: the first group to replica 0, the next to the idle one
    assert [(t.group_id, t.sample_id) for t in got] == [(g, i) for g in (0, 1) for i in range(4)]
    assert len({t.seed for t in got}) == 8  # every sample its own noise
    assert got[0].logprobs.flags.writeable and got[0].codes.flags.writeable  # copies, not views of the store
    assert_same(got, alone(single, PROMPTS, **options), exact=True)
    # the same call on one runtime: every code is the same; logprobs within the runtime's own batch bound
    assert_same(got, single.rollout(PROMPTS, **options).trajectories(120), exact=False)
    # the second prompt alone, as prompt 1 of a larger rollout: now the first group, so replica 0 runs it
    moved = pool.rollout(PROMPTS[1:], first_prompt_index=1, **options)
    as_they_finish = list(moved)
    assert moved.placements == [[0]]
    assert [t.sample_id for t in as_they_finish] == [0, 1, 2, 3]  # a group comes whole, sample-minor
    assert_same(as_they_finish, got[4:], exact=True)


def test_a_bad_prompt_fails_its_rollout_with_the_runtimes_error_and_the_pool_goes_on(pool):
    batch = pool.rollout([PROMPTS[0], {"text": "x", "no_such_field": 1}], n=2, max_frames=8)
    with pytest.raises(RequestError, match="no_such_field"):
        batch.trajectories(60)
    with pytest.raises(TypeError, match="unknown option"):
        pool.rollout(PROMPTS, n=1, max_frames=8, temprature=0.5).trajectories(60)
    assert len(pool.rollout(PROMPTS, n=1, max_frames=4).trajectories(60)) == 2


def test_a_replica_that_cannot_start_fails_the_pool_with_its_reason(pool, tmp_path):
    with pytest.raises(RuntimeError, match="replicas failed to start: replica 0: .*"):
        RolloutPool.from_card(CARD, replicas=1, checkpoint=str(tmp_path / "missing"),
                              resources_per_replica={"num_cpus": 0.25}, start_timeout=60)


def pace(pool, seconds: float, actors=None) -> None:
    """Every replica's (or `actors`') frames take at least `seconds` each (0: their own pace again), set in its
    process."""
    def set_pace(replica, seconds=seconds):  # a local function: sent by value to the replica's process
        import time

        loop = replica.runtime.family.ar_loop
        loop.__dict__.pop("advance", None)
        if seconds:
            real = loop.advance

            def advance(state, plan, row):
                time.sleep(seconds)
                return real(state, plan, row)

            loop.advance = advance

    ray.get([actor.__ray_call__.remote(set_pace) for actor in (pool.actors if actors is None else actors)],
            timeout=60)


def test_groups_follow_outstanding_work_not_round_robin(pool):
    pace(pool, 0.005)  # the long group's 400 steps of 4 rows take >= 8 s: it still runs when the short ones end
    try:
        long = pool.rollout([PROMPTS[0]], n=4, seed=1, max_frames=400, min_frames=400)
        wait_for(lambda: long.placements[0], 60, "the long group to be placed")
        (busy,) = long.placements[0]
        short = pool.rollout([PROMPTS[1], PROMPTS[0], PROMPTS[1]], n=1, seed=2, max_frames=8)
        assert len(short.trajectories(60)) == 3
        assert short.placements == [[1 - busy]] * 3  # 8, 16, 24 frames of budget stay below the busy one's 1,600
        assert not long.ended
        long.cancel()
        with pytest.raises(RolloutCancelled):
            long.trajectories(60)
        wait_for(lambda: pool.stats()["replicas"][busy]["runtime"]["running"] == 0, 60, "the cancelled group to end")
    finally:
        pace(pool, 0)


@pytest.mark.exact
def test_update_weights_orders_versions(pool, single, tmp_path):
    version = push(pool, single, 1.05)
    assert pool.weight_version == version
    stats = pool.stats()
    assert [r["runtime"]["weight_version"] for r in stats["replicas"]] == [version, version]
    options = dict(n=2, seed=4, max_frames=16)
    got = pool.rollout(PROMPTS, **options).trajectories(60)
    assert {t.weight_version for t in got} == {version}
    assert_same(got, alone(single, PROMPTS, **options), exact=True)

    for bad in (version, version - 1):
        with pytest.raises(WeightUpdateError, match="greater than the current version"):
            pool.update_weights(scaled_weights(1.0), bad)
    with pytest.raises(WeightUpdateError, match="expected an int"):
        pool.update_weights(scaled_weights(1.0), 2.5)
    with pytest.raises(WeightUpdateError, match="unknown"):  # refused by every replica: nothing changes
        pool.update_weights({"no.such.weight": scaled_weights(1.0)["local_transformer.ln_f.weight"]}, version + 1)
    assert pool.weight_version == version

    # wait: rollouts in flight finish on the old weights; any rollout started after the call runs on the new
    pace(pool, 0.005)  # 120 steps of 2 rows take >= 1.2 s, 400 >= 4 s: both groups are seen running, the update
    try:               # is asked for while they run, however fast the host is
        running = pool.rollout(PROMPTS, n=2, seed=5, max_frames=120, min_frames=120)
        wait_for(lambda: pool.stats()["total"]["runtime"]["running"] == 4, 60, "both groups to run")
        newer = push(pool, single, 0.97, mode="wait")
        assert {t.weight_version for t in running.trajectories(60)} == {version}
        assert {t.weight_version for t in pool.rollout(PROMPTS, n=1, seed=6, max_frames=4).trajectories(60)} == {newer}
        # abort: what runs ends with "abort" under the old version
        running = pool.rollout(PROMPTS, n=2, seed=5, max_frames=400, min_frames=400)
        wait_for(lambda: pool.stats()["total"]["runtime"]["running"] == 4, 60, "both groups to run")
        newest = push(pool, single, 1.02, mode="abort")
        aborted = running.trajectories(60)
    finally:
        pace(pool, 0)
    assert {(t.finish_reason, t.weight_version) for t in aborted} == {("abort", newer)}
    # a reference already in the object store, and a checkpoint on disk
    tensors = scaled_weights(1.04)
    pool.update_weights(ray.put(tensors), newest + 1)
    single.update_weights(tensors, newest + 1)
    from safetensors.torch import save_file
    save_file(scaled_weights(0.99), str(tmp_path / "model.safetensors"))
    pool.update_weights_from_disk(tmp_path, newest + 2)
    single.update_weights_from_disk(str(tmp_path), newest + 2)
    got = pool.rollout(PROMPTS, **options).trajectories(60)
    assert_same(got, alone(single, PROMPTS, **options), exact=True)
    assert {r["runtime"]["weight_version"] for r in pool.stats()["replicas"]} == {newest + 2}


def test_a_killed_replica_costs_no_trajectory_and_returns_with_the_current_weights(pool, single):
    version = push(pool, single, 1.03)
    before = pool.stats()
    pid = ray.get(pool.actors[0].info.remote())["pid"]
    options = dict(n=2, seed=3, max_frames=60, min_frames=20, **UNCUT)
    pace(pool, 0.01)  # a group's >= 20 steps of 2 rows take >= 0.4 s: replica 0 still runs its groups at the kill
    try:
        batch = pool.rollout(MORE, **options)
        wait_for(lambda: pool.stats()["replicas"][0]["in_flight"]["groups"] > 0 and
                 pool.stats()["total"]["runtime"]["running"] > 0, 60, "replica 0 to run groups")
        ray.kill(pool.actors[0], no_restart=False)  # Ray restarts it (max_restarts); the pool reloads its weights
        got = batch.trajectories(120)
    finally:
        pace(pool, 0, pool.actors[1:])  # the restarted replica 0 runs at its own pace already
    assert len(got) == 8 and [(t.group_id, t.sample_id) for t in got] == [(g, i) for g in range(4) for i in range(2)]
    assert {t.weight_version for t in got} == {version}
    assert_same(got, single.rollout(MORE, **options).trajectories(120), exact=False)
    assert any(len(p) == 2 and p[0] == 0 for p in batch.placements)  # resubmitted after replica 0 died
    wait_for(lambda: pool.stats()["replicas"][0]["state"] == "ready", 60, "replica 0 to come back")
    stats = pool.stats()
    r0 = stats["replicas"][0]
    assert r0["losses"] == before["replicas"][0]["losses"] + 1 and r0["resubmitted"] >= 1
    assert r0["runtime"]["weight_version"] == version  # replayed before it was given work
    assert ray.get(pool.actors[0].info.remote())["pid"] != pid
    again = pool.rollout(PROMPTS, n=2, seed=8, max_frames=12, **UNCUT)
    got = again.trajectories(60)
    assert again.placements == [[0], [1]]
    # the restarted replica prefills what the reference runtime serves from its prefix cache: same codes,
    # logprobs within the runtime's cached-vs-uncached bound
    assert_same(got, alone(single, PROMPTS, n=2, seed=8, max_frames=12, **UNCUT), exact=False)
    assert stats["total"]["trajectories"] == sum(r["trajectories"] for r in stats["replicas"])
