"""End to end with the Mimi codec: the context audio encoded to its codes and prompt rows, the greedy runs
decoded to the reference waveforms (`P_gen_wav`: the frames before the first all-zero frame)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from v2.models.csm.generate import generate
from v2.models.csm.prompt import Turn, prompt_rows

from .conftest import CHECKPOINT, KEYS, np_close, turns_of

mimi = pytest.importorskip("v2.models.mimi.model")


@pytest.fixture(scope="module")
def codec():
    return mimi.MimiModel.from_pretrained(CHECKPOINT, prefix="codec_model.", config_key="codec_config")


def test_context_audio_through_the_codec_gives_the_reference_prompt(cmodel, cref, cmeta, codec):
    codes = codec.encode([torch.from_numpy(cref["ctx_context_wav"])])[0]
    assert torch.equal(codes, torch.from_numpy(cref["ctx_context_codes"]))
    turns = [Turn(t.speaker, text_ids=t.text_ids, audio=codes if t.audio is not None else None)
             for t in turns_of(cmeta, cref, "ctx")]
    np_close(prompt_rows(cmodel, turns), cref["ctx_prompt_embeds"])


@pytest.mark.parametrize("key", KEYS)
def test_greedy_runs_decode_to_the_reference_waveforms(cmodel, cref, codec, key):
    g = generate(cmodel, torch.from_numpy(cref[f"{key}_prompt_embeds"]), max_new_tokens=8)
    wav = codec.decode(g.audio_codes[None])[0]
    expected = cref[f"{key}_gen_wav"]
    assert wav.shape[0] == g.audio_frames * codec.hop == expected.shape[0]
    assert float(np.abs(wav.numpy() - expected).max()) <= 1e-4
