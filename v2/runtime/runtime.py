"""The runtime as callers see it: `submit()` from any thread, handles, rollouts, weight updates, stats, close.

Owns: building a runtime from a card (its family, named by the card, binds the card and its experts; the
loops the card or the caller adds, `add_loops`, wired around it: added_graph.py; the runtime holds an
`Engine`, which it starts last), the voice store it holds (a request's voice looked up by name), encode-only
jobs (`encode_audio`, and for the voice store the codes with the arrays the family's voices carry; a voice
from a speaker embedding through the family's `voice_from_embedding`, where it has one),
weight-update calls (handed to the engine's gate), rollouts, `stats()` and `close()`. Its requests' way in
(validating and queueing requests, a group sharing one prompt, open requests whose text arrives in pieces,
the card's `input_idle_timeout_s` handed to the engine for them, cancels) is submitting.py's `Submitting`;
word timestamps through the added loop named "aligner" (`from_card(aligner=...)`, `align`, `has_aligner`;
the `timestamps` field refused without it) are aligning.py's `Aligning`: `Runtime` is both, with what they
use set here. Everything it queues is run by the engine thread (engine.py).
Must not know: any family (the card names it; `v2.card.family_of` finds it), steps, executors, the device
stream's workings, loop logic.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import numpy as np
import torch

from v2.card import DEFAULT_CARD, ModelCard, family_of, load_card
from v2.errors import OverloadedError, RequestError  # noqa: F401 - OverloadedError: re-exported
from v2.runtime import shutdown, weight_updates
from v2.runtime.device import Stream, default_stream
from v2.runtime.encoding import EncodeJob
from v2.runtime.added_graph import AddLoops, added_loops, with_added
from v2.runtime.aligning import ALIGNER, Aligning, WordAligner, with_aligner
from v2.runtime.engine import Engine
from v2.runtime.family import Family, TextInput, VoiceArrays, VoiceEmbedding
from v2.runtime.inbox import Cancel, Encode
from v2.runtime.submitting import Submitting
from v2.voices.store import Voice, VoiceError, VoiceStore, store_directory


class Runtime(Submitting, Aligning):
    def __init__(self, card: ModelCard, *experts: Any, graphs: bool = True, voices_dir: str | None = None,
                 stream: Stream | None = None, family: Family | None = None, add_loops: AddLoops = (),
                 **named: Any) -> None:
        """`experts` / `named`: what the card's family binds (its `bind`: e.g. a model, a codec, a tokenizer,
        a codec encoder without which reference audio is refused).
        `graphs`: capture and replay CUDA graphs for the step kinds that have them (on CUDA only).
        `voices_dir`: the voice store's directory (default: the card's, else the user's cache).
        `stream`: the device stream the engine launches on (default: the family's device's; the runtime owns
        it and closes it); e.g. `SimulatedStream(latency)` to run a CPU like an asynchronous device.
        `family`: a family already bound (instead of the card's family binding `experts`).
        `add_loops`: loops added to the card's graph besides its `added_loops`, the family knowing nothing of
        them (v2/runtime/added.py): registered names, `NAME=TARGET` (a registered name or "module:attr"), or
        `AddedLoopDecl`s by name; refused (`CardError` naming the field) as a card's are."""
        self.card = card
        self.family: Family = family or family_of(card).bind(card, *experts, graphs=graphs, **named)
        self.engine = Engine(with_added(self.family, card, add_loops), stream or default_stream(self.family.device))
        self._cond = self.engine.cond
        # optional capabilities: text fed while a request runs; voices that carry more than codes
        self._text_input = self.family if isinstance(self.family, TextInput) else None
        self._voice_arrays = self.family if isinstance(self.family, VoiceArrays) else None
        arrays = self._voice_arrays.voice_arrays if self._voice_arrays is not None else {}
        self.voices = VoiceStore(store_directory(card.name, voices_dir, card.runtime.voices_dir),
                                 encode=self._encode_voice if arrays else self.encode_audio,
                                 width=self.family.code_width, codebook_size=self.family.codebook_size, arrays=arrays,
                                 embed=self.family.voice_from_embedding if isinstance(self.family, VoiceEmbedding)
                                 else None)
        added = getattr(self.engine.family, "built", {}).get(ALIGNER)
        self._aligner: WordAligner | None = added if isinstance(added, WordAligner) else None
        self._ids = itertools.count()
        self.engine.thread.start()
        shutdown.track(self)  # closed at interpreter exit if still open (shutdown.py)

    @classmethod
    def from_card(cls, card: str | ModelCard = DEFAULT_CARD, *, checkpoint: str | None = None,
                  codec_checkpoint: str | None = None, device: str | None = None, dtype: torch.dtype | None = None,
                  graphs: bool = True, voices_dir: str | None = None, stream: Stream | None = None,
                  add_loops: AddLoops = (), aligner: str | None = None) -> "Runtime":
        """`card`: a card name in cards/, a path, or a loaded card. Default device: CUDA when present. Its
        family builds the experts it names (`checkpoint`: the model's, `codec_checkpoint`: the codec's).
        `add_loops`: loops added to its graph (see `Runtime`), checked before any model loads.
        `aligner`: add the word aligner (the added loop "aligner": `timestamps: "word"`, `align`), read from
        an aligner card's name or path (e.g. "forced_aligner_tiny"), a checkpoint directory or a hub id."""
        card = card if isinstance(card, ModelCard) else load_card(card)
        if aligner is not None:
            add_loops = with_aligner(add_loops, aligner)
        added_loops(card, add_loops)  # a refusal comes before the experts load
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        experts = family_of(card).experts(card, checkpoint=checkpoint, codec_checkpoint=codec_checkpoint,
                                                  device=device, dtype=dtype)
        return cls(card, graphs=graphs, voices_dir=voices_dir, stream=stream, add_loops=add_loops, **experts)

    @property
    def model(self) -> Any:
        """The family's model (what weight updates write)."""
        return self.family.weights

    @property
    def sample_rate(self) -> int:
        """The audio's sample rate (Hz)."""
        return self.family.sample_rate

    @property
    def channels(self) -> int:
        return self.family.channels

    @property
    def speakers(self) -> tuple[str, ...]:
        """The checkpoint's built-in voices a request names as `speaker` (empty where the family has none)."""
        return tuple(self.family.speakers)

    @property
    def request_fields(self) -> frozenset[str]:
        """The request fields the family takes (a server sends only these)."""
        return frozenset(self.family.request_fields)

    @property
    def sampling_keys(self) -> tuple[str, ...]:
        """The keys the family's nested `sampling` takes (none where it declares none)."""
        return tuple(self.family.sampling_keys)

    @property
    def frame_rate(self) -> float:
        """Frames per second of audio."""
        return self.family.frame_rate


    def encode_audio(self, audio: Any, *, timeout: float | None = None) -> np.ndarray:
        """One recording (a path, file bytes or (samples, sample_rate)) -> its codes [N, G], encoded on the
        engine by the family's front loop, batched with requests' references (this thread waits)."""
        job = self._encode(self.family.read_input(audio), timeout)
        assert job.codes is not None
        return job.codes[0]

    def _encode_voice(self, audio: Any) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A voice to store from one recording: its codes and the arrays the family's voices carry (e.g. a
        speaker embedding), all from one front-loop run on the engine (`family.read_voice`, `voice_outputs`)."""
        voices = self._voice_arrays
        assert voices is not None  # the store encodes this way only where the family's voices carry arrays
        job = self._encode(voices.read_voice(audio), None)
        assert job.codes is not None
        return job.codes[0], dict(voices.voice_outputs(job.state))

    def _encode(self, wav: Any, timeout: float | None) -> EncodeJob:
        """Run the front loop on one prepared input as a job; this thread waits for it."""
        with self._cond:
            if self.engine.closed:
                raise RuntimeError("the runtime is closed")
            rid = next(self._ids)
            job = EncodeJob(self.family.front_state(rid, (wav,)))
            self.engine.inbox.post(Encode(rid, job))
        if not job.done.wait(timeout):
            with self._cond:
                self.engine.inbox.post(Cancel(rid, "timed out"))  # the engine fails the job if it still runs
            if not job.done.is_set():
                raise TimeoutError(f"reference encode not finished within {timeout} s")
        if job.error is not None:
            raise RuntimeError(f"encode failed: {job.error}")
        return job

    def _voice(self, name: str | None) -> Voice | None:
        if name is None:
            return None
        try:
            return self.voices.get(name)
        except VoiceError as e:
            raise RequestError(str(e), field="voice") from None

    def rollout(self, prompts: list[Any], *, n: int = 1, seed: int = 0, **options: Any) -> Any:
        """n samples per prompt (sample i of prompt g seeded `v2.rl.batch.sample_seed(seed, g, i)`, one shared
        prefill per prompt): a `RolloutBatch` to iterate as trajectories finish, or `.trajectories()` in
        prompt-major, sample-minor order."""
        from v2.rl.batch import start_rollout

        return start_rollout(self, prompts, n=n, seed=seed, **options)

    @property
    def weight_version(self) -> int:
        return self.engine.gate.version

    def update_weights(self, named_tensors: dict[str, torch.Tensor], version: int, *, mode: str = "wait",
                       timeout: float | None = None) -> None:
        """Copy new weights into the model in place (names as in the model or the release checkpoint).

        mode "wait": requests in flight finish on the old weights first; "abort": they end with "abort".
        Requests waiting for admission start on the new weights. Returns once applied. All or nothing: every
        name, shape and value (finite, floating; cast to the parameter's dtype) is checked first, and a failure
        part-way restores what was written. `version`: an int above the current one. On `timeout` the
        update is withdrawn (TimeoutError) and never applied later.
        """
        gate = self.engine.gate
        gate.check(version, mode)
        gate.request(weight_updates.from_tensors(self.family.weights, named_tensors, self.family.weight_names),
                     version, mode, timeout, closed=lambda: self.engine.closed)

    def update_weights_from_disk(self, path: str, version: int, *, mode: str = "wait",
                                 timeout: float | None = None) -> None:
        """`update_weights` from a safetensors checkpoint directory, read one tensor at a time."""
        gate = self.engine.gate
        gate.check(version, mode)
        gate.request(weight_updates.from_disk(self.family.weights, path, self.family.weight_names), version, mode,
                     timeout, closed=lambda: self.engine.closed)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return self.engine.stats()

    def close(self, *, drain: bool = False, timeout: float | None = None) -> None:
        """Stop taking requests; finish the ones in flight (`drain`) or abort them; free everything.

        Waits up to `timeout` for that; past it, the engine goes on ending every request in the background
        and every handle still gets its result. Callable from any thread, callbacks included."""
        engine = self.engine
        with self._cond:
            engine.closed, engine.drain = True, drain
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        left = lambda: None if deadline is None else max(0.0, deadline - time.monotonic())  # noqa: E731
        if threading.current_thread() is not engine.thread:
            engine.thread.join(left())
        engine.results.join(left())
        engine.callbacks.join(left())

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

