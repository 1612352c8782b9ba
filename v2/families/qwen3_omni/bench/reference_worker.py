"""The reference side of Qwen3-Omni's comparison: transformers' `Qwen3OmniMoeForConditionalGeneration.generate(...,
return_audio=True)`, run in a child process under the reference's python (`python reference_worker.py
--checkpoint DIR --prompts FILE --fixture NPZ`).

Owns: loading the checkpoint with transformers (float32, CPU, eager attention, as the fixture was made), one
intra-op thread, greedy decoding on both stages (the thinker's default; `talker_do_sample=False`, which the code
predictor mirrors), a prompt's audio input (the fixture's stored log-mel and feature mask: the processor's
output for its clip), the talker's codes (read from the `code2wav.chunked_decode` call inside `generate`, which
returns only text and the waveform), and the fixture check: the four prompts at the fixture's caps against the
stored thinker tokens, codes and `wav_generate`. Protocol: one JSON line on stdout when ready (`torch`,
`transformers`, `fixture_equal`), then per stdin line `{"prompts": [index...], "tokens", "frames", "out"}` the
prompts one after another (one `generate` each: the reference runs one request at a time with audio output),
one JSON line back: `wall_s` (the `generate` calls alone, summed), `each_s`, `text_ids` and `codes` per prompt;
the waveforms go to the `.npz` file `out` names (`wav_<i>`).
Must not know: v2 (this file imports only torch, numpy and transformers, so it runs in any environment that
has them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import torch

EOS = 151645


def greedy_code_predictor(model: Any) -> None:
    """The code predictor decodes greedily when the talker does, as transformers 5.23 (which made the fixture)
    does; 5.0.0 passes `do_sample=True, top_k=50, top_p=0.8` to it whatever the talker's setting. Only the
    sampling flag changes: the call and everything it computes are transformers'."""
    inner = model.talker.code_predictor.generate

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        kwargs.update(do_sample=False, top_k=None, top_p=None)
        return inner(*args, **kwargs)

    model.talker.code_predictor.generate = wrapped


class Recorder:
    """Wraps the model's `code2wav.chunked_decode` to keep the codes [1, 16, F] it is given."""

    def __init__(self, model: Any) -> None:
        self.codes: np.ndarray | None = None
        inner = model.code2wav.chunked_decode

        def wrapped(codes: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            self.codes = codes[0].T.cpu().numpy()  # [1, 16, F] -> [F, 16]
            return inner(codes, *args, **kwargs)

        model.code2wav.chunked_decode = wrapped


def run(model: Any, rec: Recorder, prompt: dict[str, Any], ref: Any, tokens: int,
        frames: int) -> tuple[float, list[int], np.ndarray, np.ndarray]:
    """One `generate`: (wall s, new token ids, codes [F, 16], waveform [samples])."""
    ids = torch.tensor([prompt["input_ids"]], dtype=torch.long)  # [1, T]
    kw: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if prompt.get("audio"):
        kw["input_features"] = torch.from_numpy(ref["c_audio_mel"])[None]  # [1, 128, L]
        kw["feature_attention_mask"] = torch.from_numpy(ref["c_audio_feature_mask"])[None]  # [1, L]
    rec.codes = None
    start = time.perf_counter()
    seq, wav = model.generate(**kw, speaker=prompt["speaker"], return_audio=True, thinker_max_new_tokens=tokens,
                              talker_max_new_tokens=frames, talker_do_sample=False)
    wall = time.perf_counter() - start
    codes = rec.codes if rec.codes is not None else np.zeros((0, 16), dtype=np.int64)
    return wall, seq[0, ids.shape[1]:].tolist(), codes, wav.reshape(-1).cpu().numpy()


def fixture_check(model: Any, rec: Recorder, prompts: list[dict[str, Any]], ref: Any,
                  caps: tuple[int, int]) -> dict[str, bool]:
    """The fixture's four prompts at its caps: thinker tokens and codes equal, the waveform within 1e-4."""
    out: dict[str, bool] = {}
    for p in prompts[:4]:
        key = p["key"]
        _, toks, codes, wav = run(model, rec, p, ref, *caps)
        want = ref[f"{key}_wav_generate"]
        out[key] = (toks == ref[f"{key}_thinker_tokens"].tolist() and np.array_equal(codes, ref[f"{key}_codes"])
                    and wav.shape == want.shape and bool(np.allclose(wav, want, atol=1e-4, rtol=1e-4)))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--prompts", required=True, help="a JSON file: [{key, input_ids, speaker, audio}, ...]")
    p.add_argument("--fixture", required=True, help="the fixture's reference.npz (the audio prompt's log-mel)")
    p.add_argument("--fixture-caps", default=None, help="[thinker cap, talker cap]: check the fixture's outputs")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import transformers
    from transformers import Qwen3OmniMoeForConditionalGeneration
    from transformers.models.qwen3_omni_moe import configuration_qwen3_omni_moe as omni_config
    from transformers.utils import logging

    # transformers 5.0.0's code predictor config reads `use_sliding_window` before setting it; the fixture's code
    # predictor has full attention in every layer, so the class default False is what the config means
    if not hasattr(omni_config.Qwen3OmniMoeTalkerCodePredictorConfig, "use_sliding_window"):
        omni_config.Qwen3OmniMoeTalkerCodePredictorConfig.use_sliding_window = False

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    with open(args.prompts) as f:
        prompts: list[dict[str, Any]] = json.load(f)
    ref = np.load(args.fixture)
    model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(args.checkpoint, dtype=torch.float32,
                                                                 attn_implementation="eager").eval()
    greedy_code_predictor(model)
    rec = Recorder(model)
    ready: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__}
    with torch.no_grad():
        if args.fixture_caps:
            caps = json.loads(args.fixture_caps)
            ready["fixture_equal"] = fixture_check(model, rec, prompts, ref, (int(caps[0]), int(caps[1])))
        print(json.dumps(ready), flush=True)
        for line in sys.stdin:
            ask = json.loads(line)
            each, texts, codes, wavs = [], [], [], {}
            for n, i in enumerate(ask["prompts"]):
                wall, toks, c, wav = run(model, rec, prompts[i], ref, int(ask["tokens"]), int(ask["frames"]))
                each.append(wall)
                texts.append(toks)
                codes.append(c.tolist())
                wavs[f"wav_{n}"] = wav
            np.savez(ask["out"], allow_pickle=False, **wavs)
            print(json.dumps({"wall_s": sum(each), "each_s": each, "text_ids": texts, "codes": codes}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
