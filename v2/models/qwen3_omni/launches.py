"""`python -m v2.models.qwen3_omni.launches`: kernel launches per thinker token step and per talker frame step of
Qwen3-Omni-30B-A3B-Instruct at the release's dimensions (release.py), with the Triton kernels on.

Owns: the two steps as a runtime runs them, from staged inputs, for `--buckets` rows at mixed positions in a
paged KV (`--context` tokens deep): the thinker step (the sampled ids' `embed_tokens` rows, one decode row
through the 48 MoE layers, the lm head, the greedy argmax: the release's default thinker sampling) and the
talker frame step (the thinker's next text row projected (`project_text`), Qwen3-TTS's `frame_step`: the code
predictor's 15 steps and draws, frame(codes) + the text row, one decode row through the 20 MoE layers,
group-0 logits; then `choose`). Two counters:
- `--device meta` (default): no memory, no GPU. The models at the release's widths on the meta device, every
  aten operation that launches a kernel counted by v2.bench.launches' dispatch counter and every Triton kernel
  replaced by a counter of its launches (their Python wrappers still run), after one warm-up step.
- `--device cuda`: the real launches (kernels, copies and fills on the GPU, from torch.profiler) of each step on
  random bf16 weights at the release's widths, the thinker and talker stacks built with 1 and 2 layers and
  scaled: launches(L) = launches(1) + (L - 1) * (launches(2) - launches(1)) (the layers are alike).
Also per step: the MoE block's share (`moe_per_layer`: one layer's block) and the op breakdown. One JSON line last.
Must not know: requests, families, scheduling, timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from typing import Any, Callable

import torch

from v2.bench.launches import counted
from v2.models.kv_cache import PagedKVCache
from v2.models.qwen3_omni.config import Qwen3OmniConfig
from v2.models.qwen3_omni.release import release_config
from v2.models.qwen3_omni.talker import OmniTalker
from v2.models.qwen3_omni.thinker import Thinker
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.sampling import Qwen3TTSSamplingTensors
from v2.models.weights import empty_model

BLOCK_SIZE = 16  # KV rows per block
AIMS = {"thinker": 400, "talker": 900}


def with_layers(cfg: Qwen3OmniConfig, thinker: int | None, talker: int | None) -> Qwen3OmniConfig:
    """The config with the thinker's and the talker's decoder depths replaced (None: kept)."""
    def deep(part: Any, n: int | None) -> Any:
        if n is None:
            return part
        text = dataclasses.replace(part.text, decoder=dataclasses.replace(part.text.decoder, num_layers=n))
        return dataclasses.replace(part, text=text)
    return dataclasses.replace(cfg, thinker=deep(cfg.thinker, thinker), talker=deep(cfg.talker, talker))


def build(cfg: Qwen3OmniConfig, device: str) -> tuple[Thinker, OmniTalker]:
    """The thinker and the talker in bf16: on meta, shapes only; elsewhere random weights (N(0, 0.02))."""
    thinker, talker = empty_model(Thinker, cfg.thinker), empty_model(OmniTalker, cfg)
    if device == "meta":
        return thinker.to(torch.bfloat16).eval(), talker.to(torch.bfloat16).eval()
    out = []
    for model in (thinker, talker):
        model = model.to_empty(device=device).to(torch.bfloat16).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02)
        out.append(model)
    th, tk = out
    assert isinstance(th, Thinker) and isinstance(tk, OmniTalker)
    tk.set_special_text(torch.randn(3, cfg.thinker.hidden_size, device=device) * 0.02)
    return th, tk


def _paged(cfg: Any, bucket: int, context: int, device: str) -> tuple[PagedKVCache, torch.Tensor, torch.Tensor]:
    """A paged cache, block tables [B, W] and positions [B] at mixed depths below `context`."""
    width = -(-context // BLOCK_SIZE)
    cache = PagedKVCache.allocate(cfg, bucket * width, BLOCK_SIZE, dtype=torch.bfloat16, device=device)
    tables = torch.arange(bucket * width, device=device).view(bucket, width)  # [B, W]
    positions = torch.tensor([(37 * i) % (context - 64) + 32 for i in range(bucket)], device=device)  # [B]
    return cache, tables, positions


def thinker_step(th: Thinker, bucket: int, context: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(the whole token step, its first layer's MoE block alone) for `bucket` rows."""
    d = th.cfg.text.decoder
    dev = str(th.lm_head.weight.device)
    cache, tables, positions = _paged(d, bucket, context, dev)
    ids = torch.zeros(bucket, 1, dtype=torch.long, device=dev)  # [B, 1]: the last sampled ids
    rows = torch.zeros(bucket, 1, d.hidden_size, dtype=torch.bfloat16, device=dev)  # [B, 1, H]

    def step() -> torch.Tensor:
        h = th.model.forward_cached(th.model.embed_tokens(ids), cache, tables, positions[:, None], context_len=context)
        return th.logits(h[:, 0]).argmax(-1)  # [B]

    return step, lambda: th.model.layers[0].mlp(rows)


def talker_step(tk: OmniTalker, bucket: int, context: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(the whole frame step, its first layer's MoE block alone) for `bucket` rows (the release sampling)."""
    cfg, dev = tk.cfg, str(tk.device)
    h = cfg.talker.hidden_size
    cache, tables, positions = _paged(cfg.talker.decoder, bucket, context, dev)
    cp_cache = tk.talker.code_predictor.allocate_kv(bucket, dtype=torch.bfloat16, device=dev)
    s = Qwen3TTSSamplingTensors.build([Qwen3TTSSampling()] * bucket, list(range(bucket)), dev)
    long: dict[str, Any] = dict(dtype=torch.long, device=dev)
    hidden = torch.zeros(bucket, h, dtype=torch.bfloat16, device=dev)  # [B, H]
    thinker_row = torch.zeros(bucket, tk.omni.thinker_hidden_size, dtype=torch.bfloat16, device=dev)
    c0, frame, after = (torch.zeros(bucket, **long) for _ in range(3))
    valid = torch.ones(bucket, dtype=torch.bool, device=dev)
    seen = torch.zeros(bucket, cfg.talker.vocab_size, dtype=torch.bool, device=dev)

    def step() -> Any:
        text = tk.project_text(thinker_row)  # [B, H]
        out = tk.frame_step(hidden, c0, text, s, frame, cache, tables, positions, valid=valid, context_len=context,
                            cp_cache=cp_cache, return_logits=False)
        return tk.choose(out.logits, s, after, seen=seen, allow_eos=valid)

    return step, lambda: tk.talker.model.layers[0].mlp(hidden[:, None])


def meta_counts(cfg: Qwen3OmniConfig, buckets: list[int], context: int) -> list[dict[str, Any]]:
    """Every bucket's two steps on the meta device, the Triton kernels as counters."""
    th, tk = build(cfg, "meta")
    rows = []
    for bucket in buckets:
        row: dict[str, Any] = {"bucket": bucket}
        for name, (step, moe) in (("thinker", thinker_step(th, bucket, context)),
                                  ("talker", talker_step(tk, bucket, context))):
            ops, moe_ops = counted(step, use_kernels=True), counted(moe, use_kernels=True)
            row[name] = {"launches": sum(ops.values()), "aim": AIMS[name], "moe_per_layer": sum(moe_ops.values()),
                         "moe_ops": dict(moe_ops.most_common()), "ops": dict(ops.most_common())}
        rows.append(row)
    return rows



def device_launches(fn: Callable[[], Any]) -> Counter[str]:
    """What one call of `fn` puts on the GPU (kernels, copies, fills), by name, from torch.profiler, after one
    uncounted warm-up call (Triton's compiles, tables made once)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    seen = Counter(e.name for e in prof.events() if e.device_type == DeviceType.CUDA)
    if not seen:
        raise SystemExit("launches: the profiler saw no GPU work (is CUPTI available?)")
    return seen


def cuda_counts(cfg: Qwen3OmniConfig, buckets: list[int], context: int, device: str = "cuda",
                count: Callable[[Callable[[], Any]], Counter[str]] = device_launches) -> list[dict[str, Any]]:
    """Every bucket's two steps on `device` counted by `count`, stacks of 1 and 2 layers scaled to the release's
    depths (the tests count on the CPU with the dispatch counter)."""
    depth = {"thinker": cfg.thinker.text.decoder.num_layers, "talker": cfg.talker.text.decoder.num_layers if
             cfg.talker is not None else 0}
    counts: dict[int, dict[str, dict[int, Counter[str]]]] = {b: {"thinker": {}, "talker": {}} for b in buckets}
    moe: dict[int, dict[str, Counter[str]]] = {b: {} for b in buckets}
    for layers in (1, 2):
        th, tk = build(with_layers(cfg, layers, layers), device)
        for bucket in buckets:
            for name, (step, block) in (("thinker", thinker_step(th, bucket, context)),
                                        ("talker", talker_step(tk, bucket, context))):
                counts[bucket][name][layers] = count(step)
                moe[bucket][name] = count(block)
        del th, tk
        if device == "cuda":
            torch.cuda.empty_cache()
    rows = []
    for bucket in buckets:
        row: dict[str, Any] = {"bucket": bucket}
        for name in ("thinker", "talker"):
            one, two = (sum(counts[bucket][name][n].values()) for n in (1, 2))
            row[name] = {"launches": one + (depth[name] - 1) * (two - one), "aim": AIMS[name],
                         "per_layer": two - one, "measured": {"1_layer": one, "2_layers": two},
                         "moe_per_layer": sum(moe[bucket][name].values()),
                         "moe_ops": dict(moe[bucket][name].most_common()),
                         "ops_2_layers": dict(counts[bucket][name][2].most_common())}
        rows.append(row)
    return rows

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.models.qwen3_omni.launches", description=__doc__.splitlines()[0])
    p.add_argument("--buckets", type=int, nargs="+", default=[1, 16], help="rows per step (default: 1 16)")
    p.add_argument("--context", type=int, default=512, help="tokens already in each row's KV (default: 512)")
    p.add_argument("--device", choices=["meta", "cuda"], default="meta",
                   help="meta: the dispatch counter, no GPU (default); cuda: the profiler's real launches")
    args = p.parse_args(argv)
    if args.context <= 64:
        p.error("--context must exceed 64 (rows sit at mixed positions from 32 up)")
    if min(args.buckets) < 1:
        p.error("--buckets must be >= 1")
    cfg = release_config()
    rows = meta_counts(cfg, args.buckets, args.context) if args.device == "meta" else cuda_counts(cfg, args.buckets,
                                                                                                 args.context)
    for row in rows:
        print(f"bucket={row['bucket']} " + " ".join(f"{k}={row[k]['launches']} (moe/layer {row[k]['moe_per_layer']})"
                                                   for k in ("thinker", "talker")), file=sys.stderr)
    print(json.dumps({"bench": "qwen3_omni.launches", "dims": "release", "device": args.device, "dtype": "bfloat16",
                      "context": args.context, "aims": AIMS, "buckets": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
