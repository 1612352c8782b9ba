"""A conversation's turns on the seeded `csm_tiny` card (UTF-8 bytes as text ids): the spoken turn rendered
`[{speaker}]{text}` between `<|begin_of_text|>` and `<|end_of_text|>`, a context turn's audio encoded by the
front loop == the same turn given its codes, a stored voice (codes and transcript) == that context turn, and
`reference_audio` with its transcript == a context turn in the request's speaker."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import ROLLOUT

pytestmark = pytest.mark.exact
TEXT = "Hello there."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from v2.runtime import Runtime

    rt = Runtime.from_card("csm_tiny", device="cpu", voices_dir=str(tmp_path_factory.mktemp("voices")))
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def wav() -> tuple[np.ndarray, int]:
    t = np.arange(int(0.7 * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000  # resampled to 24 kHz on the way in


def test_the_turn_is_rendered_with_its_speaker(tiny):
    fam = tiny.family
    rows = fam.prepare(fam.parse({"text": TEXT, "speaker": 7})).rows
    ids = fam.cfg.ids
    assert rows[:, 0].tolist() == [ids.bos, *f"[7]{TEXT}".encode(), ids.eos]
    assert (rows[:, 1:] == -1).all()
    default = fam.prepare(fam.parse({"text": TEXT})).rows  # the card's default speaker: 0
    assert default[:, 0].tolist() == [ids.bos, *f"[0]{TEXT}".encode(), ids.eos]


def test_context_audio_equals_its_codes(tiny, wav):
    codes = tiny.encode_audio(wav)
    turn = {"speaker": 0, "text": "Hi, how are you?"}
    fam = tiny.family
    rows = fam.prepare(fam.parse({"text": TEXT, "speaker": 1, "context": [{**turn, "codes": codes}]})).rows
    audio = rows[:, 0] == fam.cfg.ids.audio
    assert int(audio.sum()) == len(codes) == -(-round(len(wav[0]) * 1.5) // 1920)
    assert (rows[audio, 1:].numpy() == codes).all() and (rows[-len(TEXT) - 6, 1:] == 0).all()  # <|audio_eos|>
    by_audio = tiny.submit({"text": TEXT, "speaker": 1, "seed": 2, "max_frames": 5,
                            "context": [{**turn, "audio": wav}], **ROLLOUT}).result()
    by_codes = tiny.submit({"text": TEXT, "speaker": 1, "seed": 2, "max_frames": 5,
                            "context": [{**turn, "codes": codes}], **ROLLOUT}).result()
    np.testing.assert_array_equal(by_audio.trajectory.prompt_rows, by_codes.trajectory.prompt_rows)
    np.testing.assert_array_equal(by_audio.codes, by_codes.codes)


def test_a_stored_voice_is_a_context_turn(tiny, wav):
    voice = tiny.voices.add("host", wav, text="Welcome back.", replace=True)
    by_voice = tiny.submit({"text": TEXT, "speaker": 1, "voice": "host", "seed": 4, "max_frames": 5}).result()
    by_turn = tiny.submit({"text": TEXT, "speaker": 1, "seed": 4, "max_frames": 5,
                           "context": [{"speaker": 1, "text": "Welcome back.", "codes": voice.codes}]}).result()
    np.testing.assert_array_equal(by_voice.codes, by_turn.codes)
    np.testing.assert_array_equal(by_voice.audio, by_turn.audio)


def test_reference_audio_is_a_context_turn(tiny, wav):
    by_ref = tiny.submit({"text": TEXT, "speaker": 0, "seed": 6, "max_frames": 5, "reference_audio": wav,
                          "reference_text": "Welcome back."}).result()
    by_turn = tiny.submit({"text": TEXT, "speaker": 0, "seed": 6, "max_frames": 5,
                           "context": [{"speaker": 0, "text": "Welcome back.", "audio": wav}]}).result()
    np.testing.assert_array_equal(by_ref.codes, by_turn.codes)
