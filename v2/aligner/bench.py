"""What word timestamps cost the serving path: `python -m v2.aligner.bench --card CARD` prints JSON.

Owns: one runtime with the aligner added, the same requests with and without `timestamps: "word"` at 1 and
at N together (alternating, `--repeats` times; the best of each kept, as the machine's load varies): audio
seconds per second and the mean time to first audio, and the aligner kind's launches and rows.
Must not know: any family (the card names it), the aligner's internals.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from v2.card import DEFAULT_CARD
from v2.runtime import Runtime


def run(card: str, aligner: str, concurrency: int, frames: int, repeats: int) -> dict[str, Any]:
    requests = [{"text": f"Sentence number {i} is here. And a second one.", "max_frames": frames, "seed": i}
                for i in range(concurrency)]
    seen: dict[str, list[tuple[float, float]]] = {}
    with Runtime.from_card(card, device="cpu", aligner=aligner) as rt:
        rt.submit(dict(requests[0], timestamps="word")).result(600)  # warm
        for _ in range(repeats):
            for words in (False, True):
                for c in (1, concurrency):
                    start = time.perf_counter()
                    results = [h.result(600) for h in rt.submit_many(
                        [dict(r, timestamps="word") if words else r for r in requests[:c]])]
                    took = time.perf_counter() - start
                    audio = sum(r.metrics.audio_seconds for r in results)
                    ttfa = sum(r.metrics.ttfa_s or 0.0 for r in results) / len(results)
                    seen.setdefault(f"c{c}_{'words' if words else 'plain'}", []).append((audio / took, ttfa))
        kind = rt.stats()["kinds"].get("aligner_align", {})
    out: dict[str, Any] = {k: {"audio_s_per_s": round(max(a for a, _ in v), 3), "ttfa_s": round(min(t for _, t in v), 4)}
                           for k, v in seen.items()}
    out["aligner_kind"] = {"calls": kind.get("calls"), "rows": kind.get("rows"), "seconds": kind.get("seconds")}
    return {"card": card, "aligner": aligner, "frames": frames, "repeats": repeats, **out}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--card", default=DEFAULT_CARD)
    p.add_argument("--aligner", default="forced_aligner_tiny")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--frames", type=int, default=24)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    print(json.dumps(run(a.card, a.aligner, a.concurrency, a.frames, a.repeats)))


if __name__ == "__main__":
    main()
