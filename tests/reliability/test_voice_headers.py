"""A stored voice's arrays are believed only once their `.npy` header agrees with the file: a header that
claims more than the file holds (or more than an entry may hold), a dtype that is not a number, a broken
header or a payload of the wrong length makes that entry an error in `errors`, skipped, never an
allocation or an exception out of `list()`; the other voices are listed as before."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from v2.voices.store import VoiceStore


def no_encoder(_audio: object) -> np.ndarray:
    raise AssertionError("codes only here")


def header(shape: tuple[int, ...], descr: str = "<i8") -> bytes:
    """A version 1.0 `.npy` header declaring `shape` of `descr`, padded as numpy pads it."""
    text = repr({"descr": descr, "fortran_order": False, "shape": shape})
    pad = 64 - (10 + len(text) + 1) % 64
    body = (text + " " * pad + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body


CORRUPT = {
    "huge": header((2**33, 12)) + b"\0" * 96,                       # 768 GiB claimed, 96 bytes there
    "over_limit": header((2**21, 12)) + b"\0" * 96,                 # more than an entry may hold
    "short": header((4, 12)) + b"\0" * 100,                        # 384 bytes claimed
    "objects": header((2, 12), "|O") + b"\0" * 192,                 # pickled objects
    "text": header((2, 12), "<U4") + b"\0" * 384,                   # not numbers
    "garbage": b"\x93NUMPY\x09\x00" + b"\xff" * 64,                 # an unknown format version
    "no_magic": b"just some bytes, not an array at all\n" * 4,
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_a_codes_file_whose_header_lies_is_skipped_with_its_reason(tmp_path, kind):
    store = VoiceStore(tmp_path, encode=no_encoder, width=12)
    store.add("alice", np.full((3, 12), 5, np.int64), text="good")
    store.add("bob", np.full((2, 12), 7, np.int64), text="to be broken")
    (tmp_path / "bob" / "codes.npy").write_bytes(CORRUPT[kind])
    fresh = VoiceStore(tmp_path, encode=no_encoder, width=12)
    tracemalloc.start()
    try:
        listed = fresh.list()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [v.name for v in listed] == ["alice"] and np.array_equal(listed[0].codes, np.full((3, 12), 5))
    assert len(fresh.errors) == 1 and fresh.errors[0].startswith("bob: ") and "codes.npy" in fresh.errors[0]
    assert peak < 8 * 2**20  # nothing allocated for what the header claims


def test_a_named_array_whose_header_lies_is_skipped(tmp_path):
    store = VoiceStore(tmp_path, encode=no_encoder, width=12, arrays={"x_vector": (4,)})
    store.add("carol", np.full((2, 12), 1, np.int64), arrays={"x_vector": np.ones(4, np.float32)})
    (tmp_path / "carol" / "x_vector.npy").write_bytes(header((2**40,), "<f4") + b"\0" * 16)
    fresh = VoiceStore(tmp_path, encode=no_encoder, width=12, arrays={"x_vector": (4,)})
    assert fresh.list() == [] and "x_vector.npy" in fresh.errors[0]


def test_well_formed_arrays_still_load_in_either_order(tmp_path):
    store = VoiceStore(tmp_path, encode=no_encoder, width=12)
    codes = np.arange(36, dtype=np.int64).reshape(3, 12) % 1024
    store.add("dave", codes)
    np.save(tmp_path / "dave" / "codes.npy", np.asfortranarray(codes))
    assert np.array_equal(VoiceStore(tmp_path, encode=no_encoder, width=12).get("dave").codes, codes)
