"""`python -m v2.models.forced_aligner.launches`: the operations (kernel launches) one aligner forward makes per
clip, at Qwen3-ForcedAligner-0.6B's dimensions (`release_config`; `--dims tiny`: the tiny card's), counted on the
CPU; one JSON line last.

Owns: the release config (the fixture README's section 11: AuT 1024 x 24 layers, 480 conv channels; Qwen3
decoder 1024 x 28 layers, 16 / 8 heads of 128, 3072 FFN; 152064 ids; 5000 classes of 80 ms), and the count of
the aligner kind's launch (`AlignExecutor.launch`'s work: each clip's log-mel and prompt, one `marker_logits`
call for the batch, the argmax) for `--batch` clips of `--seconds` each, split into features, encoder and
decoder (with the head). Counted by `v2.bench.launches`' dispatch counter (every aten operation but views and
allocations), two ways: `device` (the forms a GPU runs: F.linear, the torch attention, what `exact.on` false
selects) and `cpu` (the exact forms: row tiles of 16, halving sums). Real tensors on the CPU, random weights
at the release widths, the stacks built with 1 and 2 layers and scaled: launches(L) = launches(1) + (L - 1) *
(launches(2) - launches(1)) (the layers are alike). Without Triton here, the fused kernels' torch forms.
Must not know: requests, the runtime, timing.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from v2.bench.launches import counted
from v2.models import exact
from v2.models.forced_aligner.align import prompt_ids
from v2.models.forced_aligner.config import ForcedAlignerConfig
from v2.models.forced_aligner.features import audio_tokens, clip_features
from v2.models.forced_aligner.model import ForcedAligner
from v2.models.weights import empty_model

RATE = 16000
WORDS_PER_SECOND = 2.5  # speech's pace: the prompt's words per second of audio
IDS_PER_WORD = 2        # a word's BPE ids (a stand-in: launches do not depend on the ids' values)


def release_config(audio_layers: int = 24, text_layers: int = 28) -> dict[str, Any]:
    """Qwen3-ForcedAligner-0.6B's config.json (the parts this build reads), at the given depths."""
    return {
        "timestamp_segment_time": 80, "timestamp_token_id": 151705,
        "thinker_config": {
            "model_type": "qwen3_forced_aligner", "audio_start_token_id": 151669, "audio_end_token_id": 151670,
            "audio_token_id": 151676, "classify_num": 5000,
            "audio_config": {"d_model": 1024, "downsample_hidden_size": 480, "encoder_attention_heads": 16,
                             "encoder_ffn_dim": 4096, "encoder_layers": audio_layers, "n_window": 50,
                             "n_window_infer": 800, "num_mel_bins": 128, "output_dim": 1024,
                             "max_source_positions": 1500},
            "text_config": {"head_dim": 128, "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072,
                            "num_attention_heads": 16, "num_hidden_layers": text_layers, "num_key_value_heads": 8,
                            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "vocab_size": 152064},
        },
    }


def full_config(dims: str) -> dict[str, Any]:
    """`release_config()` (dims "release") or the `forced_aligner_tiny` card's config ("tiny")."""
    if dims == "release":
        return release_config()
    from v2.aligner.card import resolve_aligner

    seeded = resolve_aligner("forced_aligner_tiny").seed_table
    assert seeded is not None
    return copy.deepcopy(seeded.config)


def dims_config(dims: str, audio_layers: int, text_layers: int) -> dict[str, Any]:
    """`full_config(dims)` at the given depths."""
    config = full_config(dims)
    config["thinker_config"]["audio_config"]["encoder_layers"] = audio_layers
    config["thinker_config"]["text_config"]["num_hidden_layers"] = text_layers
    return config


def random_model(config: dict[str, Any], seed: int = 0, dtype: torch.dtype = torch.float32) -> ForcedAligner:
    """The aligner at `config`'s sizes on the CPU, every parameter ~ N(0, 0.02) (norm weights 1)."""
    model = empty_model(ForcedAligner, ForcedAlignerConfig.from_dict(config)).to_empty(device="cpu").to(dtype)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and not name.endswith("bias"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return model.eval()


def clip_inputs(seconds: float, seed: int) -> tuple[torch.Tensor, tuple[tuple[int, ...], ...]]:
    """A clip of `seconds` of noise at 16 kHz [n] and its words' ids (2.5 words a second, 2 ids a word)."""
    gen = torch.Generator().manual_seed(seed)
    wave = torch.randn(int(seconds * RATE), generator=gen) * 0.1  # [n]
    words = max(1, round(seconds * WORDS_PER_SECOND))
    return wave, tuple(tuple(1000 + 7 * w + i for i in range(IDS_PER_WORD)) for w in range(words))


@contextmanager
def device_forms(on: bool) -> Iterator[None]:
    """With `on`, every `exact` site takes the form a GPU runs (`exact.on` false), on CPU tensors."""
    saved = exact.on
    if on:
        exact.on = lambda x: False  # type: ignore[assignment]
    try:
        yield
    finally:
        exact.on = saved  # type: ignore[assignment]


def parts(model: ForcedAligner, clips: list[tuple[torch.Tensor, tuple[tuple[int, ...], ...]]],
          device: bool) -> dict[str, Counter[str]]:
    """The launches of one aligner batch, by part: `features` (log-mel and prompt per clip), `encoder` (the
    audio tower, every clip), `decoder` (the rest of `marker_logits`: embedding, decoder, head; and the argmax)."""
    cfg = model.cfg
    mels = [clip_features(wave, cfg.audio) for wave, _ in clips]  # [mel, T] each
    prompts = [torch.tensor(prompt_ids(ids, audio_tokens(mel.shape[1], cfg.audio), cfg.ids))
               for (_, ids), mel in zip(clips, mels)]

    def features() -> Any:
        for (wave, ids) in clips:
            mel = clip_features(wave, cfg.audio)
            torch.tensor(prompt_ids(ids, audio_tokens(mel.shape[1], cfg.audio), cfg.ids))

    def whole() -> Any:
        return torch.cat([lg.argmax(-1) for lg in model.marker_logits(prompts, mels)])

    with device_forms(device):
        out = {"features": counted(features, use_kernels=False), "encoder": counted(lambda: model.encode(mels),
                                                                                  use_kernels=False)}
        out["decoder"] = counted(whole, use_kernels=False) - out["encoder"]
    return out


def count(seconds: float, batch: int, dims: str = "release") -> dict[str, Any]:
    """Launches per batch and per clip at the config's depths, both ways (scaled from 1- and 2-layer stacks)."""
    clips = [clip_inputs(seconds, seed=i) for i in range(batch)]
    by_depth: dict[int, dict[bool, dict[str, Counter[str]]]] = {}
    for layers in (1, 2):
        model = random_model(dims_config(dims, layers, layers))
        by_depth[layers] = {device: parts(model, clips, device) for device in (True, False)}
        del model
    full = ForcedAlignerConfig.from_dict(full_config(dims))
    depth = {"features": 1, "encoder": full.audio.num_layers, "decoder": full.text.num_layers}
    row: dict[str, Any] = {"seconds": seconds, "batch": batch, "words_per_clip": len(clips[0][1])}
    for device, way in ((True, "device"), (False, "cpu")):
        one, two = by_depth[1][device], by_depth[2][device]
        totals = {}
        for part in depth:
            a, b = sum(one[part].values()), sum(two[part].values())
            per_layer = b - a
            totals[part] = {"launches": a + (depth[part] - 1) * per_layer, "per_layer": per_layer}
        total = sum(t["launches"] for t in totals.values())
        row[way] = {"launches": total, "per_clip": total / batch, "parts": totals,
                    "ops_2_layers": dict(sum((two[p] for p in depth), Counter()).most_common(12))}
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.models.forced_aligner.launches", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, nargs="+", default=[3.0, 10.0],
                   help="each clip's audio seconds, one count each (default: 3 10)")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8], help="clips per forward (default: 1 8)")
    p.add_argument("--dims", choices=["release", "tiny"], default="release",
                   help="release: Qwen3-ForcedAligner-0.6B's sizes; tiny: the forced_aligner_tiny card's (default: %(default)s)")
    args = p.parse_args(argv)
    if min(args.seconds) <= 0:
        p.error("--seconds: each must be > 0")
    if min(args.batch) < 1:
        p.error("--batch: each must be >= 1")
    torch.manual_seed(0)
    rows = [count(s, b, args.dims) for s in args.seconds for b in args.batch]
    for r in rows:
        print(f"{r['seconds']:>5.1f} s x {r['batch']:>2}: device {r['device']['per_clip']:>7.0f} per clip "
              f"(" + ", ".join(f"{k} {v['launches']}" for k, v in r["device"]["parts"].items()) + f"); cpu exact "
              f"{r['cpu']['per_clip']:>7.0f} per clip", file=sys.stderr)
    print(json.dumps({"bench": "forced_aligner.launches",
                      "dims": "release (Qwen3-ForcedAligner-0.6B)" if args.dims == "release" else "tiny (forced_aligner_tiny)",
                      "counted_on": "cpu, dispatch counter, random float32 weights, 1- and 2-layer stacks scaled",
                      "config": full_config(args.dims), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
