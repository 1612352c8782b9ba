"""The two-loop test family's card section: `thinker` (a paged loop that gives tokens) feeds `talker` (a
paged loop that takes tokens and gives frames) feeds `codec` (a chunk loop that takes frames and gives the
audio), which may feed `aligner` (a loop after the audio loop that takes its chunks)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from v2.card import ChunkLoopDecl, LoopDecl, LoopTable, ModelCard, PagedLoopDecl, _Frozen


class ThinkerDecl(PagedLoopDecl):
    class_: Literal["ThinkerLoop"] = Field(alias="class")
    gives: ClassVar[str | None] = "tokens"
    hidden: int = 32
    layers: int = 2


class TalkerDecl(PagedLoopDecl):
    class_: Literal["TalkerLoop"] = Field(alias="class")
    takes: ClassVar[str | None] = "tokens"
    gives: ClassVar[str | None] = "frames"
    hidden: int = 48
    layers: int = 3


class CodecDecl(ChunkLoopDecl):
    class_: Literal["CodecLoop"] = Field(alias="class")
    gives: ClassVar[str | None] = "audio"  # its chunks, to the caller and to a loop that takes audio


class AlignerDecl(LoopDecl):
    """A loop added after the audio loop (a stand-in for a word aligner): it takes the audio chunks."""

    class_: Literal["AlignerLoop"] = Field(alias="class")
    takes: ClassVar[str | None] = "audio"


class TwoLoopTable(LoopTable):
    thinker: ThinkerDecl
    talker: TalkerDecl
    codec: CodecDecl | None = None
    aligner: AlignerDecl | None = None


class TwoLoopSection(_Frozen):
    seed: int = 0  # the weights' seed


class TwoLoopCard(ModelCard):
    family: Literal["twoloop"] = "twoloop"
    model: TwoLoopSection = TwoLoopSection()
    loops: TwoLoopTable


CARD = TwoLoopCard


def card(*, think_blocks: int | None = None, talk_blocks: int | None = None, prefix_cache: bool = True,
         prefill_chunk_rows: int = 64, max_running: int = 8, codec: bool = True, aligner: bool = False,
         **talker: object) -> TwoLoopCard:
    """A card for tests and the bench (`think_blocks` / `talk_blocks`: each loop's pool; None: full length for
    every slot)."""
    common = {"max_prompt_rows": 96, "max_running": max_running, "max_waiting": 64, "max_buffered_chunks": 64,
              "prefill_chunk_rows": prefill_chunk_rows, "batch_buckets": [1, 2, 4, 8, 16, 32, 64],
              "block_size": 16, "prefix_cache": prefix_cache}
    loops: dict[str, object] = {
        "thinker": {"class": "ThinkerLoop", "feeds": ["talker"], "max_frames": 32, "kv_blocks": think_blocks, **common},
        "talker": {"class": "TalkerLoop", "feeds": ["codec"] if codec else [], "max_frames": 32,
                   "kv_blocks": talk_blocks, **common, **talker},
    }
    if codec:
        loops["codec"] = {"class": "CodecLoop", "first_chunk_frames": 2, "chunk_frames": 4, "max_streams": max_running,
                          "batch_buckets": [1, 2, 4, 8, 16, 32, 64], "frame_buckets": [1, 2, 4],
                          "feeds": ["aligner"] if aligner else []}
        if aligner:
            loops["aligner"] = {"class": "AlignerLoop"}
    return TwoLoopCard.model_validate({"name": "twoloop", "family": "twoloop", "loops": loops})
