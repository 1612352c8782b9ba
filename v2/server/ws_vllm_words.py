"""vllm-omni's word timestamps on the speech stream, for its clients: a config's `word_timestamps: true` (with
`stream_audio` and pcm, as vllm-omni asks) sends each sentence's audio as JSON `audio.chunk` events instead of
binary frames, and after its audio a last `audio.chunk` with no audio that carries the sentence's words, in
milliseconds from the sentence's start, then its `audio.done`.

Owns: `VllmWordSentences` (ws_speak.py's `Sentences` with those shapes): `audio.start` with `word_timestamps:
true`; each pcm piece as `audio.chunk {utterance_index, sentence_index, chunk_id, chunk_start_ms,
chunk_end_ms, sample_rate, channels, audio_b64, timestamps: null}`; the words' chunk (`audio_b64: ""`,
`timestamps: [{word, start_ms, end_ms}]`, or null where the request ended before its sentence was aligned);
and holding what follows a sentence's audio (its `audio.done`, the next sentence's start and audio) until its
words are known, so every event goes out in vllm-omni's order.
Must not know: the session's messages in, the engine, how formats are encoded (audio.py), the aligner.
"""

from __future__ import annotations

import base64
from typing import Any

from v2.events import SentenceWords
from v2.server.ws_speak import Sentences

_WAIT = "words"  # a queue entry: the words' chunk of a sentence, sent once its words are known


class VllmWordSentences(Sentences):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue: list[tuple[Any, int]] = []  # (message or a words entry, its audio's bytes), in send order
        self.known: dict[int, SentenceWords] = {}
        self.ending = False                     # the request has ended: no more words will come
        self.chunk_ids: dict[int, int] = {}     # a sentence's chunks so far
        self.starts: dict[int, int] = {}        # a sentence's first frame
        self.started: dict[int, int] = {}       # sentences whose audio.start went out -> their bytes sent
        self.done: set[int] = set()             # sentences whose audio.done went out

    def _ms(self, nbytes: int) -> int:
        spec = self.c.spec
        return int(round(nbytes / (2 * spec.channels) / spec.sample_rate * 1000))

    def _chunk(self, index: int, audio: bytes, start: int, end: int, stamps: Any) -> dict[str, Any]:
        chunk_id = self.chunk_ids.get(index, 0)
        self.chunk_ids[index] = chunk_id + 1
        return {"type": "audio.chunk", "utterance_index": self.u.index, "sentence_index": index,
                "chunk_id": chunk_id, "chunk_start_ms": start, "chunk_end_ms": end,
                "sample_rate": self.c.spec.sample_rate, "channels": self.c.spec.channels,
                "audio_b64": base64.b64encode(audio).decode(), "timestamps": stamps}

    async def out(self, message: dict[str, Any] | bytes) -> None:
        if isinstance(message, bytes):
            entry: tuple[Any, int] = (self._chunk(self.current, message, self._ms(self.bytes),
                                                  self._ms(self.bytes + len(message)), None), len(message))
        elif message["type"] == "audio.start":
            self.starts[message["sentence_index"]] = self.frames
            entry = ({**message, "word_timestamps": True}, 0)
        else:
            if message["type"] == "audio.done":
                self.queue.append(((_WAIT, message["sentence_index"], self._ms(self.bytes)), 0))
            entry = (message, 0)
        self.queue.append(entry)
        await self._pump()

    async def words(self, every: bool = False) -> None:
        for s in self.held:
            self.known[s.index] = s
        self.held = []
        self.ending = self.ending or every
        await self._pump()

    async def _pump(self) -> None:
        while self.queue:
            message, nbytes = self.queue[0]
            if isinstance(message, tuple):
                _, index, end_ms = message
                s = self.known.get(index)
                if s is None and not self.ending:
                    return  # its words are not known yet: what follows waits
                message = self._chunk(index, b"", 0, end_ms, None if s is None else self._stamps(index, s))
            await self.send(message, self.u)
            self.queue.pop(0)
            index = message.get("sentence_index", -1)
            if message["type"] == "audio.start":
                self.started[index] = 0
            elif message["type"] == "audio.chunk":
                self.started[index] = self.started.get(index, 0) + nbytes
            elif message["type"] == "audio.done":
                self.done.add(index)

    def _stamps(self, index: int, s: SentenceWords) -> list[dict[str, Any]]:
        """The sentence's words in milliseconds from its start (the aligner's are from the utterance's)."""
        start = self.starts.get(index, 0) * self.hop / self.native_rate
        return [{"word": w.word, "start_ms": int(round((w.start - start) * 1000)),
                 "end_ms": int(round((w.end - start) * 1000))} for w in s.words]

    @property
    def sent_s(self) -> float:
        """Seconds of the utterance's audio whose chunks went out (held ones are not)."""
        return max((self.starts.get(i, 0) * self.hop / self.native_rate + self._ms(n) / 1000
                    for i, n in self.started.items()), default=0.0)

    def unfinished(self) -> list[tuple[int, int]]:
        return [(i, n) for i, n in sorted(self.started.items()) if i not in self.done]

    @property
    def begun(self) -> int:
        return len(self.started)
