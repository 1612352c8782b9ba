"""The card's loop graph is data: the loops a card declares and their `feeds` are what the engine drives.

A card that leaves the audio loop out (for rollouts that need no audio) runs with no code change: the same
codes and trajectories as the full card for the same seeds, empty audio, and no audio work launched (no
AUDIO_CHUNK batch, no codec slot, no codec executor); `stream=True` is refused at submit naming the field.
A graph its family's loops cannot make is refused when the card loads, naming the field. Both shipped
families, on their tiny cards."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from v2.card import CardError, card_path, load_card
from v2.contracts import WorkUnitKind
from v2.runtime import Runtime

# card -> (its AR loop, its audio loop, its front loop)
CARDS = {"moss_tts_local_tiny": ("ar_decode", "vocoder", "encode"), "qwen3_tts_tiny": ("talker", "codec", "encode")}
TEXTS = ["The graph is the card's.", "No audio, only codes."]


def card_text(name: str) -> str:
    return card_path(name).read_text()


def without_audio(text: str, name: str) -> str:
    """The card with its audio loop's table left out and the edge to it gone."""
    ar, audio, _ = CARDS[name]
    start = text.index(f"[loops.{audio}]\n")
    end = text.index("\n[", start)
    text = text[:start] + text[end + 1:]
    return text.replace(f'feeds = ["{audio}"]', "feeds = []", 1)


def write(tmp_path: Path, text: str, name: str = "card.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


class Counting:
    """An executor that counts its device launches (by kind) and otherwise is the one it wraps."""

    def __init__(self, inner: Any, kind: Any, counts: Counter) -> None:
        self.inner, self.kind, self.counts = inner, kind, counts

    def pack(self, batch: Any) -> Any:
        return self.inner.pack(batch)

    def launch(self, packed: Any) -> Any:
        self.counts[self.kind] += 1
        return self.inner.launch(packed)

    def read(self, host: Any, batch: Any) -> Any:
        return self.inner.read(host, batch)


def counted(rt: Runtime) -> Counter:
    counts: Counter = Counter()
    executors = rt.engine.executors  # the engine and its read half share this table
    for kind in list(executors):
        executors[kind] = Counting(executors[kind], kind, counts)
    return counts


@pytest.fixture(scope="module", params=list(CARDS))
def pair(request, tmp_path_factory) -> Iterator[tuple[str, Runtime, Runtime]]:
    """A family's tiny card and the same card without its audio loop, each on a runtime."""
    name = request.param
    folder = tmp_path_factory.mktemp(name)
    full = Runtime.from_card(name, device="cpu", voices_dir=str(folder / "voices"))
    bare = Runtime.from_card(load_card(write(folder, without_audio(card_text(name), name), f"{name}_no_audio.toml")),
                             device="cpu", voices_dir=str(folder / "voices"))
    try:
        yield name, full, bare
    finally:
        full.close()
        bare.close()


def test_a_card_without_the_audio_loop_gives_the_same_codes_and_trajectories_and_no_audio_work(pair):
    name, full, bare = pair
    ar, audio, _ = CARDS[name]
    assert [n for n, _ in bare.card.loops.driven()] == [ar] and bare.family.graph.audio is None
    assert bare.family.codec_exec is None  # no codec executor built, so none captured or allocated
    full_counts, bare_counts = counted(full), counted(bare)
    want = full.rollout(TEXTS, n=2, seed=5, max_frames=12).trajectories(120)
    got = bare.rollout(TEXTS, n=2, seed=5, max_frames=12).trajectories(120)
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert (g.group_id, g.sample_id, g.seed, g.finish_reason) == (w.group_id, w.sample_id, w.seed, w.finish_reason)
        assert len(g.codes) > 0 and g.logprobs.shape[0] == len(g.codes)
        np.testing.assert_array_equal(g.codes, w.codes)
        np.testing.assert_array_equal(g.logprobs, w.logprobs)  # trajectories with logprobs, as the full card's
        np.testing.assert_array_equal(g.prompt_rows, w.prompt_rows)
        assert g.audio is None
    # audio asked for (the default) on a card that makes none: codes, and empty audio of its channels
    results = [h.result(120) for h in bare.submit_many([{"text": t, "seed": 3, "max_frames": 12} for t in TEXTS])]
    wanted = [h.result(120) for h in full.submit_many([{"text": t, "seed": 3, "max_frames": 12} for t in TEXTS])]
    for r, w in zip(results, wanted):
        assert r.error is None and r.finish_reason == w.finish_reason
        np.testing.assert_array_equal(r.codes, w.codes)
        assert r.audio.shape == (bare.channels, 0) and r.metrics.ttfa_s is None
        assert w.audio.shape[1] > 0  # the full card made audio: the check above can fail
    assert full_counts[WorkUnitKind.AUDIO_CHUNK] > 0 and full_counts[WorkUnitKind.AR_FRAME] > 0
    assert bare_counts[WorkUnitKind.AR_FRAME] > 0 and bare_counts[WorkUnitKind.PREFILL] > 0
    assert WorkUnitKind.AUDIO_CHUNK not in bare.engine.executors and bare_counts[WorkUnitKind.AUDIO_CHUNK] == 0
    stats = bare.stats()
    assert "audio_chunk" not in stats["kinds"] and "codec_slots_in_use" not in stats  # no codec slot, no chunk
    assert stats["running"] == stats["waiting"] == stats["kv_slots_in_use"] == 0  # nothing leaks
    assert stats["kv_blocks_held"] == 0 or stats["kv_blocks_held"] == stats["prefix_cache_blocks"]


def test_a_card_without_audio_refuses_a_stream_naming_the_field(pair):
    name, _, bare = pair
    with pytest.raises(ValueError, match="stream: the card") as caught:
        bare.submit({"text": TEXTS[0], "seed": 1, "stream": True})
    assert getattr(caught.value, "field", None) == "stream"
    assert bare.stats()["waiting"] == 0  # nothing was queued


def test_a_card_without_audio_speaks_open_text_as_codes(pair):
    name, full, bare = pair
    got = bare.open({"seed": 4, "max_frames": 8})
    got.feed("First piece. ")
    got.end_text()
    want = full.open({"seed": 4, "max_frames": 8})
    want.feed("First piece. ")
    want.end_text()
    r, w = got.result(120), want.result(120)
    assert r.error is None and r.audio.shape[1] == 0
    np.testing.assert_array_equal(r.codes, w.codes)


@pytest.mark.parametrize("name", list(CARDS))
@pytest.mark.parametrize("case", ["unknown class", "unknown loop", "edge it cannot take", "cycle", "missing loop",
                                  "unfed audio loop", "no such target", "front loop fed"])
def test_a_graph_the_family_cannot_drive_is_refused_at_load_naming_the_field(tmp_path, name, case):
    ar, audio, front = CARDS[name]
    text = card_text(name)
    edge = f'feeds = ["{audio}"]'
    assert edge in text
    if case == "unknown class":
        changed, field = re.sub(rf'(\[loops\.{audio}\]\nclass = )"\w+"', r'\1"MyLoop"', text), f"loops.{audio}.class"
    elif case == "unknown loop":
        changed, field = text.replace(f"[loops.{audio}]\n", f"[loops.thinker]\nclass = \"Thinker\"\n\n[loops.{audio}]\n"), "loops.thinker"
    elif case == "edge it cannot take":  # the AR loop feeding the front loop
        changed, field = text.replace(edge, f'feeds = ["{audio}", "{front}"]'), f"loops.{ar}.feeds"
    elif case == "cycle":
        changed = text.replace(f"[loops.{audio}]\n", f'[loops.{audio}]\nfeeds = ["{ar}"]\n')
        field = "a cycle"
    elif case == "missing loop":
        start = text.index(f"[loops.{ar}]\n")
        end = text.index(f"[loops.{audio}]\n")
        changed, field = text[:start] + text[end:], f"loops.{ar}"
    elif case == "unfed audio loop":
        changed, field = text.replace(edge, "feeds = []"), f"loops.{audio}: no loop feeds it"
    elif case == "no such target":
        changed, field = text.replace(edge, 'feeds = ["speaker"]'), f"loops.{ar}.feeds: no loop 'speaker'"
    else:  # the front loop (its table, or the default one) feeding the AR loop
        table = f"[loops.{front}]\n"
        changed = (text.replace(table, f'{table}feeds = ["{ar}"]\n') if table in text
                   else text.replace("[runtime]\n", f'{table}feeds = ["{ar}"]\n\n[runtime]\n'))
        field = f"loops.{front}.feeds"
    assert changed != text
    with pytest.raises(CardError, match=re.escape(field)) as caught:
        load_card(write(tmp_path, changed))
    assert "Value error" not in str(caught.value)


@pytest.mark.parametrize("name", list(CARDS))
def test_the_shipped_graph_and_the_one_without_audio_load(tmp_path, name):
    ar, audio, _ = CARDS[name]
    assert [n for n, _ in load_card(name).loops.driven()] == [ar, audio]
    bare = load_card(write(tmp_path, without_audio(card_text(name), name)))
    assert [n for n, d in bare.loops.driven()] == [ar] and bare.loops.declared()[ar].feeds == ()
