"""A speech-stream session's utterances: opening each one's request, its text in, its end, cancelling it,
and speaking it.

Owns: `Speaker`, what a session holds of its utterances: the config they are opened with, the utterance
opened (for text that has not come), being written or being spoken, the conversation (a family that takes
`context`: earlier turns, each utterance spoken added with its codes, at most `conversation_turns` turns and
`conversation_seconds` of their audio, and fewer of the oldest while the family refuses them as too long,
when an utterance opens and when its own text, as it comes, leaves them no room: it is opened anew with fewer),
the sender task of each utterance (its audio out and its words: ws_speak.py), which one is being spoken after
its `input.done` (`finishing`), and a cancel's acknowledgement (the words sent and heard, with an aligner). Opening a request is the config's last check (the family's own), so a refusal
here is an `error` and nothing of the session changes.
Must not know: the WebSocket's messages beyond the ones it is handed, the engine's internals, how formats
are encoded (audio.py), how the text is cut (the family).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio

from v2.errors import OverloadedError, RequestError
from v2.params import ResolvedTurn
from v2.events import SentenceWords
from v2.server.conversation import bounded
from v2.server.errors import ApiError, runtime_field_error
from v2.server.state import ServerState
from v2.server.streaming import GOOD_ENDINGS
from v2.server.timestamps import PLAYED, heard, merged, played_ok, sentences
from v2.server.ws_config import Config
from v2.server.ws_vllm_words import VllmWordSentences
from v2.server.ws_speak import Cancelled, Gone, Outbox, Sentences, Utterance, cancelled_events, late_words

log = logging.getLogger("v2.server")


class Speaker:
    def __init__(self, st: ServerState, out: Outbox) -> None:
        self.st, self.out = st, out
        self.config: Config | None = None
        self.utterance: Utterance | None = None  # opened, being written, or being spoken
        self.count = 0  # utterances begun
        self.history: list[ResolvedTurn] = []  # the conversation so far (a family that takes context)
        self.hop = int(round(st.runtime.sample_rate / st.runtime.frame_rate))  # samples per frame
        self.finishing: asyncio.Task[None] | None = None  # the sender of the utterance being spoken after input.done
        self.senders: set[asyncio.Task[None]] = set()

    async def end(self) -> None:
        """The session is over: its requests cancelled (freed at the engine's next step), its senders ended."""
        if self.utterance is not None:
            self.utterance.handle.cancel()
        for task in list(self.senders):
            task.cancel()
        if self.senders:
            await asyncio.gather(*self.senders, return_exceptions=True)
        self.utterance, self.finishing, self.history = None, None, []

    def bounded(self, turns: list[ResolvedTurn]) -> list[ResolvedTurn]:
        return bounded(turns, self.st.config.conversation_turns, self.st.config.conversation_seconds,
                       float(self.st.runtime.frame_rate))

    async def open(self, config: Config, history: list[ResolvedTurn] | None = None,
                   keep: int | None = None) -> tuple[Any, list[ResolvedTurn]] | None:
        """The next utterance's request under `config` (opened at once: references encode while its text is
        written), with the conversation as its context where the family takes one: `history`, a new one, kept
        only if the family takes it whole (`keep` given: its last `keep` turns whole, its older ones dropped,
        oldest first, while the family refuses it); without, the session's, less its oldest turns while the
        family refuses it as context (grown past the family's own caps). None (an error sent) when refused."""
        least = 0 if history is None else len(history) if keep is None else keep  # turns that are never dropped
        turns = list(self.history if history is None else history) if config.takes_context else []
        while True:
            fields = config.request(tuple(turns) if turns else None)
            try:
                handle = await anyio.to_thread.run_sync(lambda: self.st.runtime.open(fields, split=config.split))
                return handle, turns
            except RequestError as e:
                err = runtime_field_error(e, config.names)
                if len(turns) > least and err.param == "context":
                    turns = turns[1:]
                    continue
                await self.out.error(err.message, err.param)
            except OverloadedError as e:
                await self.out.error(f"the server is busy: {e}", None, "overloaded")
            except RuntimeError as e:
                await self.out.error(f"the runtime is not taking requests: {e}", None, "shutting_down")
            return None

    def start(self, handle: Any, turns: list[ResolvedTurn], again: Utterance | None = None) -> None:
        """The utterance opened becomes the session's next, its sender started (`again`: the utterance it is
        opened anew for, whose index, text and state it takes)."""
        self.history = turns
        handle.on_done(self.st.metrics.observe)
        if again is None:
            u = self.utterance = Utterance(self.count, handle)
            self.count += 1
        else:
            u = self.utterance = Utterance(again.index, handle, text=again.text, fed=again.fed,
                                           held=list(again.held), ended=again.ended)
        u.sender = asyncio.create_task(self.speak(u))
        self.senders.add(u.sender)
        u.sender.add_done_callback(self.senders.discard)

    async def begin(self) -> Utterance | None:
        """The session's next utterance: the one opened, else a new one under the config."""
        u = self.utterance
        if u is not None and not u.begun and u.handle.done:  # it ended before any text (its idle timeout)
            self.withdraw()
            u = None
        if u is None:
            assert self.config is not None
            opened = await self.open(self.config)
            if opened is None:
                return None
            self.start(*opened)
        return self.utterance

    def withdraw(self) -> None:
        """The utterance opened for text that has not come: cancelled, nothing sent for it."""
        u = self.utterance
        if u is not None:
            u.silent = True
            u.handle.cancel()
            self.utterance = None

    async def text(self, piece: Any) -> None:
        if not isinstance(piece, str):
            await self.out.error("text: a string", "text")
            return
        u = await self.begin()
        if u is None:
            return
        limit = self.st.config.max_input_chars
        if len(u.text) + len(piece) > limit:
            await self.out.error(f"text: the utterance would be {len(u.text) + len(piece)} characters, over the "
                                 f"limit of {limit} (--max-input-chars); send input.done", "text",
                                 "string_above_max_length")
            return
        assert self.config is not None
        if self.config.feeds_as_written:
            took = await self.feed(u, piece, False)
            if took is None:
                return
            u = took
        else:
            u.held.append(piece)
            await self.feed(u, "", False)  # nothing to say yet; the request is not idle
        u.text += piece

    async def feed(self, u: Utterance, piece: str, end: bool) -> Utterance | None:
        """`piece` (or the text's end) into `u`'s request: the utterance that took it, or None (an error sent).
        A piece the family refuses because the conversation leaves it no room (a refusal naming `context`,
        before any audio of the utterance went out) is taken by the utterance opened anew with fewer turns
        (`fewer_turns`)."""
        try:
            await anyio.to_thread.run_sync(lambda: u.handle.end_text() if end else u.handle.feed(piece))
        except RequestError as e:
            err = self.piece_error(e)
            if err.param == "context" and self.history and (u.out is None or u.out.count == 0):
                return await self.fewer_turns(u, piece, end, err)
            await self.out.error(err.message, err.param)
            return None
        except RuntimeError as e:  # the request has ended (its sender reports why)
            await self.out.error(f"text: {e}", "text", "ended")
            return None
        u.fed += piece
        return u

    async def fewer_turns(self, u: Utterance, piece: str, end: bool, err: ApiError) -> Utterance | None:
        """`u`, whose `piece` (or end) the family refused as too long with the conversation: opened anew with
        its oldest turns dropped, one at a time, its text so far and `piece` fed again each time, until the
        family takes it; then that request is the session's utterance (`u`'s withdrawn, nothing sent for it)
        and the conversation is the turns it kept. Refused even with no turns: the error (naming the
        utterance's own field, `text`), and the session's utterance and conversation stay as they were."""
        assert self.config is not None
        turns = self.history
        while turns and err.param == "context":
            opened = await self.open(self.config, turns[1:], keep=0)
            if opened is None:  # refused (said): the session as it was
                return None
            handle, turns = opened

            def give(h: Any = handle) -> None:
                if u.fed:
                    h.feed(u.fed)
                if piece or not end:
                    h.feed(piece)
                if end:
                    h.end_text()
            try:
                await anyio.to_thread.run_sync(give)
            except RequestError as e:
                handle.cancel()
                err = self.piece_error(e)
                continue
            except RuntimeError as e:
                handle.cancel()
                await self.out.error(f"text: {e}", "text", "ended")
                return None
            self.withdraw()
            self.start(handle, turns, u)
            assert self.utterance is not None
            self.utterance.fed = u.fed + piece
            return self.utterance
        await self.out.error(err.message, err.param)
        return None

    def piece_error(self, e: RequestError) -> ApiError:
        """A piece's refusal names input.text's own field, not REST's `input`."""
        return runtime_field_error(e, self.config.names if self.config is not None else None,
                                   aliases={"text": "text"})

    async def done(self) -> None:
        """input.done: the utterance's text is complete; it is spoken while the session reads on (session.done
        ends it). A text whose end is refused ends the utterance at once (the error, then its session.done)."""
        u = await self.begin()
        if u is None:
            return
        took: Utterance | None = u
        if u.held:
            held, u.held = "".join(u.held), []
            took = await self.feed(u, held, False)
            u = took or u
        u.ended = True
        if took is not None:
            took = await self.feed(u, "", True)
            u = took or u
        if took is None:
            u.handle.cancel()  # said already: the sender closes it without another error
            u.refused = True
        self.finishing = u.sender

    async def cancel(self, played_ms: Any = None) -> None:
        """input.cancel: the utterance being written or spoken ends now. Its request is cancelled (its slots
        are freed at the engine's next step), nothing more of it is sent, and its closing events and the
        acknowledgement go out at once: `audio.done` of the open sentence and `session.done`, both
        `"cancelled": true`, then `input.cancelled`. With none under way: only `input.cancelled`,
        `"cancelled": false`. `played_ms`: the audio the client played; with an aligner, the acknowledgement lists
        the words sent and, of them, those heard (timestamps.py `heard`; ws_speak.py `late_words`)."""
        if not played_ok(played_ms):
            await self.out.error(PLAYED, "played_ms")
            return
        u = self.utterance
        if u is None or not u.begun:
            await self.out.send({"type": "input.cancelled", "utterance_index": None, "cancelled": False})
            return
        u.cancelled = True  # from here no send of its sender goes out (they check it under the lock)
        u.handle.cancel()
        self.utterance = None
        if self.finishing is u.sender:
            self.finishing = None
        aligner = self.config is not None and self.config.aligner  # + sentences ended, not yet aligned (aligned here)
        late = await anyio.to_thread.run_sync(late_words, self.st.runtime, u) if aligner else []

        def events() -> list[dict[str, Any]]:  # once any send of its under way has gone: after its last byte
            closing = cancelled_events(u)
            if not closing:  # its session.done went out just before: there was nothing left to cancel
                return [{"type": "input.cancelled", "utterance_index": None, "cancelled": False}]
            ack: dict[str, Any] = {"type": "input.cancelled", "utterance_index": u.index, "cancelled": True}
            if aligner:  # the words sent and heard, of the sentences aligned (the loop's where it has them)
                spans = sorted({s.index: s for s in [*late, *sentences(u.handle.events())]}.items())
                ack.update(heard([s for _, s in spans], 0.0 if u.out is None else u.out.sent_s, played_ms))
            return [*closing, ack]

        await self.out.send_all(events)

    async def speak(self, u: Utterance) -> None:
        """The utterance's audio, sentence by sentence as the handle's marks split it; then session.done. Sends
        nothing once it is cancelled, nor for one withdrawn or ended before the client began it."""
        config = self.config
        assert config is not None
        kind = VllmWordSentences if config.vllm_words else Sentences
        out = u.out = kind(self.out.send, u, config, self.hop, self.st.native_rate, self.st.native_channels)
        try:
            async for item in (merged(u.handle, True) if config.timestamps else u.handle):
                if isinstance(item, SentenceWords):
                    out.held.append(item)
                else:
                    await out.chunk(item.audio)
                await out.words()
            result = await anyio.to_thread.run_sync(u.handle.result)
            if u.silent or not u.begun:  # withdrawn, or ended on its own before any text: the next text opens another
                return
            failed = result.finish_reason not in GOOD_ENDINGS
            if not failed and config.takes_context and u.text.strip():  # the next utterance's context
                codes = result.codes if len(result.codes) else None
                self.history = self.bounded([*self.history, ResolvedTurn(config.given.speaker, u.text, codes=codes)])
            await out.close(failed)
            await out.words(every=True)
            if failed and not u.refused:
                await self.out.error(f"the utterance ended with {result.finish_reason}" +
                                 (f": {result.error}" if result.error else ""), None, result.finish_reason, u)
            await self.out.send({"type": "session.done", "utterance_index": u.index, "total_sentences": out.count}, u)
            u.spoken = True
        except (Cancelled, Gone):
            pass
        except Exception:  # noqa: BLE001 - a bug of ours: logged; the session goes on
            log.exception("speech stream: speaking utterance %d failed", u.index)
        finally:
            u.handle.cancel()  # the client left, the send failed, it was cancelled: free it (a finished one is left)
            if self.utterance is u:
                self.utterance = None
