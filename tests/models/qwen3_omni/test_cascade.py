"""The whole cascade from the prompt alone (no stored intermediate): prompt ids and, for prompt c, the 16 kHz
waveform -> log-mel -> audio encoder -> thinker (greedy) -> the hand-off rows from the thinker's own E and A ->
talker + code predictor (greedy) -> code2wav. Thinker ids and codes exact, the waveform within 1e-4."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.models.qwen3_omni.conftest import CHECKPOINT, KEYS
from tests.models.qwen3_omni.test_thinker_parity import EOS, prompt_rows
from v2.models.qwen3_omni.code2wav import Code2Wav
from v2.models.qwen3_omni.config import Qwen3OmniConfig
from v2.models.qwen3_omni.talker import OmniTalker
from v2.models.qwen3_omni.talker_handoff import talker_prefix, trailing_rows
from v2.models.qwen3_omni.thinker import Thinker
from v2.models.qwen3_omni.thinker_generate import greedy
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.generate import generate_batch


@pytest.fixture(scope="module")
def speech(thinker: Thinker, oconfig: dict) -> tuple[OmniTalker, Code2Wav, Qwen3OmniConfig]:
    cfg = Qwen3OmniConfig.from_dict(oconfig)
    talker = OmniTalker.from_pretrained(CHECKPOINT)
    table = thinker.model.embed_tokens.weight
    talker.set_special_text(table[[cfg.ids.tts_bos, cfg.ids.tts_eos, cfg.ids.tts_pad]].detach())
    return talker, Code2Wav.from_pretrained(CHECKPOINT), cfg


@pytest.mark.parametrize("key", KEYS)
def test_prompt_to_waveform(thinker: Thinker, speech: tuple[OmniTalker, Code2Wav, Qwen3OmniConfig],
                            oref: dict[str, np.ndarray], ometa: dict, key: str) -> None:
    talker, c2w, cfg = speech
    assert cfg.talker is not None
    meta = next(p for p in ometa["prompts"] if p["key"] == key)
    ids = meta["input_ids"]
    run = greedy(thinker, prompt_rows(thinker, oref, key), max_new_tokens=ometa["thinker_cap"], eos=EOS,
                 accept_layer=cfg.talker.accept_hidden_layer)
    assert run.tokens == meta["thinker_tokens"]
    t = len(ids)
    with torch.no_grad():
        prefix = talker_prefix(talker, ids, run.embed, run.accept, run.embed[t], talker.speaker_id(meta["speaker"]),
                               cfg.ids)
        trailing = trailing_rows(talker, run.embed[t + 1 :])
    out = generate_batch(talker, [prefix], [trailing], [Qwen3TTSSampling.greedy(1.05)], [0],
                         max_new_tokens=ometa["talker_cap"], min_new_tokens=0)[0]
    np.testing.assert_array_equal(out.codes.numpy(), oref[f"{key}_codes"])
    wav = c2w.decode(out.codes[None])[0]
    np.testing.assert_allclose(wav.numpy(), oref[f"{key}_wav_generate"], atol=1e-4, rtol=1e-4)
