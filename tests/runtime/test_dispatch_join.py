"""Joining the callbacks dispatcher from its own thread or one of its lanes (a callback that closes the runtime)
returns: two callbacks that each close do not wait for each other; from outside, the join waits for every lane."""

from __future__ import annotations

import threading

from v2.runtime.dispatch import Dispatcher


def test_two_lanes_that_each_join_do_not_wait_for_each_other() -> None:
    shared = Dispatcher()
    lanes = [shared.lane("a"), shared.lane("b")]
    inside = threading.Barrier(2, timeout=30)  # both lanes are inside their callbacks before either joins
    joined = [threading.Event(), threading.Event()]
    for lane, done in zip(lanes, joined):
        def close(done: threading.Event = done) -> None:
            inside.wait()
            shared.join()  # no timeout: a join that waits for the other lane never returns
            done.set()
        lane.post(close)
        lane.stop()
    shared.stop()
    assert all(done.wait(30) for done in joined)  # a hang check: without the rule they never return


def test_a_join_from_outside_waits_for_a_lane_still_running() -> None:
    shared = Dispatcher()
    lane = shared.lane("slow")
    release, ran = threading.Event(), threading.Event()
    lane.post(lambda: (release.wait(30), ran.set()) and None)
    lane.stop()
    shared.stop()
    waiter = threading.Thread(target=shared.join)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not ran.is_set()  # still waiting for the lane's callback
    release.set()
    waiter.join(30)
    assert not waiter.is_alive() and ran.is_set()
