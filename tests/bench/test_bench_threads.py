"""A bench run in-process leaves torch's thread count as it found it: `keeps_threads` restores it when the call
returns or raises, and a real bench main that sets one thread on the CPU (the tiny card's frame step) gives the
caller's count back."""

from __future__ import annotations

import pytest
import torch

from v2.bench.threads import keeps_threads


@pytest.fixture
def three_threads():
    saved = torch.get_num_threads()
    torch.set_num_threads(3)  # not what any bench sets, so a leak shows
    try:
        yield 3
    finally:
        torch.set_num_threads(saved)


def test_the_count_is_restored_on_return_and_on_raise(three_threads):
    @keeps_threads
    def sets(n: int, fail: bool = False) -> int:
        torch.set_num_threads(n)
        if fail:
            raise RuntimeError("bench failed")
        return torch.get_num_threads()

    assert sets(1) == 1 and torch.get_num_threads() == three_threads
    with pytest.raises(RuntimeError, match="bench failed"):
        sets(2, fail=True)
    assert torch.get_num_threads() == three_threads
    assert sets.__name__ == "sets"


def test_a_bench_main_in_process_leaves_the_callers_thread_count(three_threads, capsys):
    from v2.families.qwen3_tts.bench.framestep import main  # sets one thread on the CPU for its timing

    assert main(["--device", "cpu", "--buckets", "1", "--iters", "1", "--context", "80"]) == 0
    assert '"bench": "v2.qwen3_tts.framestep"' in capsys.readouterr().out
    assert torch.get_num_threads() == three_threads


def test_the_aligner_bench_in_process_leaves_the_callers_thread_count(three_threads, capsys):
    from v2.models.forced_aligner.bench import main  # sets the count its --threads names

    assert main(["--dims", "tiny", "--seconds", "0.5", "--repeat", "1", "--threads", "1"]) == 0
    assert capsys.readouterr().out
    assert torch.get_num_threads() == three_threads
