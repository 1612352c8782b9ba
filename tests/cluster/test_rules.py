"""The pool's rules on their own (no cluster started): placement by outstanding work, and the weight log a
restarted replica replays."""

from __future__ import annotations

import pytest

pytest.importorskip("ray", reason="v2.cluster needs Ray: pip install -e \".[ray,server]\"")

from v2.cluster.placement import Load, choose  # noqa: E402
from v2.cluster.weights import WeightLog, WeightUpdate  # noqa: E402


def test_the_least_outstanding_work_wins_not_the_next_in_turn():
    loads = [Load(4, 1600), Load(0, 0), Load(2, 80)]
    assert choose(loads, 1, capacity=128) == 1
    loads[1].add(1, 8)
    assert choose(loads, 1, capacity=128) == 1  # 8 frames owed < 80 < 1,600: still the same replica
    loads[1].add(9, 100)
    assert choose(loads, 1, capacity=128) == 2
    assert choose([Load(3, 30), Load(3, 30)], 2, capacity=128) == 0  # ties: the lowest index


def test_replicas_that_cannot_take_work_or_are_full_are_skipped():
    assert choose([None, Load(0, 0)], 4, capacity=8) == 1
    assert choose([None, None], 1, capacity=8) is None
    assert choose([Load(6, 10), Load(7, 500)], 4, capacity=8) is None  # both would pass 8 in flight
    assert choose([Load(6, 10), Load(0, 0)], 16, capacity=8) == 1  # too big for any: runs alone on an idle one
    load = Load(2, 20)
    load.remove(2, 20)
    with pytest.raises(AssertionError):
        load.remove(1, 1)


def test_the_log_keeps_what_a_restarted_replica_must_replay():
    log = WeightLog()
    a = WeightUpdate(1, tensors="ref-a", names=frozenset({"x", "y"}))
    log.push(a)
    b = WeightUpdate(2, tensors="ref-b", names=frozenset({"x"}))
    log.push(b)
    assert log.updates == [a, b] and log.version == 2  # b does not cover y: both are replayed
    c = WeightUpdate(3, tensors="ref-c", names=frozenset({"x", "y", "z"}))
    log.push(c)
    assert log.updates == [c]
    d = WeightUpdate(4, tensors="ref-d")  # names unknown until a replica reports them
    log.push(d)
    assert log.updates == [c, d]
    log.learned(d, frozenset({"x", "y", "z"}))
    assert log.updates == [d] and log.after(3) == [d] and log.after(4) == []
    partial = WeightUpdate(5, path="/ckpt/5", full=False)
    log.push(partial)
    assert log.updates == [d, partial]
    full = WeightUpdate(6, path="/ckpt/6", full=True)
    log.push(full)
    assert log.updates == [full]
    with pytest.raises(ValueError, match="greater than the current version 6"):
        log.push(WeightUpdate(6, tensors="ref"))
    refused = WeightUpdate(7, tensors="ref-bad", names=frozenset({"q"}))
    log.push(refused)
    log.pop(refused)
    assert log.updates == [full] and log.version == 6
    with pytest.raises(ValueError, match="either tensors or a checkpoint"):
        WeightUpdate(8)


def test_packed_tensors_come_back_equal_in_their_dtype_and_shape():
    import numpy as np
    import torch

    from v2.cluster.weights import pack, unpack

    named = {"a": torch.randn(3, 5).to(torch.bfloat16), "b": torch.randn(4, 6).t(), "c": torch.arange(4),
             "d": np.ones(3, np.float32), "e": "not a tensor"}
    back = unpack(pack(named))
    for k in ("a", "b", "c"):
        assert back[k].dtype == named[k].dtype and torch.equal(back[k], named[k])
    assert back["d"] is named["d"] and back["e"] == "not a tensor"
    plain = {"x": torch.ones(2)}
    assert unpack(plain) is plain
