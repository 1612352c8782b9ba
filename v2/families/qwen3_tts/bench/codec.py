"""`python -m v2.families.qwen3_tts.bench.codec`: Qwen3-TTS-Tokenizer-12Hz decode speed for a batch of streams;
one JSON line.

Owns: building the decoder (a speech_tokenizer checkpoint; default the tiny fixture), seeded codes for
`--streams` streams, and timing (a) streaming: every stream advances `--chunk` frames per call, all streams
in one `decode_chunk` call, for `--frames` frames, and (b) the same utterances decoded whole in one batched
call. Speed is seconds of audio (all streams) per second of wall time; also the time per streaming call.
Must not know: the runtime, scheduling.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from v2.bench.__main__ import machine
from v2.models.qwen3_codec import Qwen3CodecDecoder
from v2.bench.threads import keeps_threads

FIXTURE = "tests/fixtures/qwen3_tts_tiny/checkpoint/speech_tokenizer"


@keeps_threads
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=FIXTURE, help="a speech_tokenizer directory")
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--frames", type=int, default=48, help="frames per stream")
    p.add_argument("--chunk", type=int, default=4, help="frames per stream per streaming call")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iters", type=int, default=3, help="best of this many runs")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    dec = Qwen3CodecDecoder.from_pretrained(args.checkpoint)
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, dec.cfg.decoder.codebook_size, (args.streams, args.frames, dec.cfg.groups), generator=g)
    audio_s = args.streams * args.frames * dec.hop / dec.sample_rate
    dec.decode(codes[:, : args.chunk])  # warm-up
    best_stream, best_call, best_whole = float("inf"), float("inf"), float("inf")
    for _ in range(args.iters):
        state = dec.allocate_state(args.streams)
        slots = torch.arange(args.streams)
        calls = []
        for s in range(0, args.frames, args.chunk):
            t = time.perf_counter()
            dec.decode_chunk(slots, codes[:, s : s + args.chunk], state=state)
            calls.append(time.perf_counter() - t)
        best_stream, best_call = min(best_stream, sum(calls)), min(best_call, max(calls))
        t = time.perf_counter()
        dec.decode(codes)
        best_whole = min(best_whole, time.perf_counter() - t)
    print(json.dumps({
        "bench": "qwen3_codec_decode", "checkpoint": args.checkpoint, "streams": args.streams,
        "frames": args.frames, "chunk": args.chunk, "threads": args.threads, "audio_s": round(audio_s, 2),
        "streaming_audio_s_per_s": round(audio_s / best_stream, 2),
        "streaming_call_ms_max": round(best_call * 1000, 1),
        "streaming_call_audio_ms": round(args.chunk * dec.hop / dec.sample_rate * 1000, 1),
        "whole_audio_s_per_s": round(audio_s / best_whole, 2),
        "state_bytes_per_slot": dec.allocate_state(1).nbytes_per_slot(), "machine": machine("cpu")}))


if __name__ == "__main__":
    main()
