"""Qwen3-ForcedAligner against the fixture's transformers 5.23 references, stage by stage: features, the
encoder's input rows, its output, the projected audio rows, the decoder's input and output rows, the logits at
the markers, classes, fixed times and word times; the padded batch against `batch/*` (release semantics:
each clip's frames past its own length zeroed); the loader's and config's refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.models.forced_aligner.conftest import CASES, CHECKPOINT, close
from v2.models import exact
from v2.models.config import ConfigError
from v2.models.forced_aligner.align import Clip, align, prompt_ids
from v2.models.forced_aligner.config import ForcedAlignerConfig
from v2.models.forced_aligner.features import audio_tokens, clip_features
from v2.models.forced_aligner.loader import load_aligner
from v2.models.forced_aligner.model import ForcedAligner
from v2.models.aut.encoder import sinusoids
from v2.models.aut.features import rows_after_convs
from v2.models.weights import CheckpointError


def _mel(aligner: ForcedAligner, fref: dict, case: str) -> torch.Tensor:
    return clip_features(torch.from_numpy(fref[f"{case}/wave"]), aligner.cfg.audio)


@pytest.mark.parametrize("case", CASES)
def test_features_and_prompt(aligner: ForcedAligner, fref: dict, fmeta: dict, case: str) -> None:
    mel = _mel(aligner, fref, case)
    frames = int(fref[f"{case}/mel_mask"].sum())
    assert mel.shape == (128, frames)
    assert close(mel.numpy(), fref[f"{case}/mel"][:, :frames])
    assert not fref[f"{case}/mel"][:, frames:].any()  # the reference's padding is zeros (never read here)
    c = fmeta["cases"][case]
    n_audio = audio_tokens(frames, aligner.cfg.audio)
    assert n_audio == c["n_audio_tokens"]
    assert prompt_ids(c["word_ids"], n_audio, aligner.cfg.ids) == fref[f"{case}/input_ids"].tolist()


@torch.no_grad()
@pytest.mark.parametrize("case", CASES)
def test_stages(aligner: ForcedAligner, fref: dict, case: str) -> None:
    mel = _mel(aligner, fref, case)
    a = aligner.cfg.audio
    chunk = 2 * a.n_window
    rows = rows_after_convs(chunk)  # 13 of 100 frames
    whole = torch.nn.functional.pad(mel, (0, -mel.shape[1] % chunk))  # [mel, chunks * chunk]: last chunk zero-padded
    conv = aligner.audio_tower.conv_rows([whole])[0].view(-1, rows, a.d_model)  # [chunks, rows, d]
    assert close((conv - sinusoids(rows, a.d_model, conv.device)).numpy(), fref[f"{case}/audio_conv_out"])
    x = aligner.encoder_inputs([mel])[0]
    assert close(x.numpy(), fref[f"{case}/audio_encoder_in"])
    tower = aligner.audio_tower
    for layer in tower.layers:
        x = layer(x, tower.window)
    assert close(tower.ln_post(x).numpy(), fref[f"{case}/audio_encoder_out"])
    audio = aligner.encode([mel])[0]
    assert close(audio.numpy(), fref[f"{case}/audio_embeds"])
    ids = torch.from_numpy(fref[f"{case}/input_ids"])
    rows = aligner.embed(ids, audio)
    assert close(rows.numpy(), fref[f"{case}/lm_inputs_embeds"])
    hidden = aligner.model(rows[None])[0]
    assert close(hidden.numpy(), fref[f"{case}/lm_hidden"])
    marks = (ids == aligner.cfg.ids.timestamp).nonzero().squeeze(1)
    assert marks.tolist() == fref[f"{case}/marker_positions"].tolist()
    logits = aligner.marker_logits([ids], [mel])[0]
    assert close(logits.numpy(), fref[f"{case}/logits_at_markers"])
    assert logits.argmax(-1).tolist() == fref[f"{case}/classes"].tolist()


@pytest.mark.parametrize("case", CASES)
def test_align_words(aligner: ForcedAligner, fref: dict, fmeta: dict, case: str) -> None:
    c = fmeta["cases"][case]
    clip = Clip(torch.from_numpy(fref[f"{case}/wave"]), tuple(c["words"]), tuple(map(tuple, c["word_ids"])))
    got = align(aligner, [clip])[0]
    assert got.classes == c["classes"]
    assert got.fixed_ms == c["fixed_ms"]
    assert [(w.word, w.start, w.end) for w in got.words] == [(t["word"], t["start"], t["end"]) for t in c["timestamps"]]


@torch.no_grad()
def test_padded_batch(aligner: ForcedAligner, fref: dict, fmeta: dict) -> None:
    """The reference's batch features (waveforms padded together) with each clip's frames past its length
    dropped, the prompts without their left padding: logits, classes and fixed times as `batch/*`."""
    lengths = fref["batch/mel_mask"].sum(1).tolist()
    mels = [torch.from_numpy(fref["batch/mel"][b, :, :n]) for b, n in enumerate(lengths)]
    audio = aligner.encode(mels)
    assert close(torch.cat(audio).numpy(), fref["batch/audio_embeds"])
    keep = fref["batch/attention_mask"].astype(bool)
    ids = [torch.from_numpy(fref["batch/input_ids"][b][keep[b]]) for b in range(len(lengths))]
    logits = aligner.marker_logits(ids, mels)
    for b, lg in enumerate(logits):
        assert close(lg.numpy(), fref[f"batch/{b}/logits_at_markers"]), b
        classes = lg.argmax(-1).tolist()
        assert classes == fref[f"batch/{b}/classes"].tolist() == fmeta["batch"]["items_meta"][b]["classes"]


def test_loader_names_bad_keys(aligner: ForcedAligner, tmp_path: Path) -> None:
    shutil.copy(CHECKPOINT / "config.json", tmp_path / "config.json")
    tensors = load_file(str(CHECKPOINT / "model.safetensors"))
    del tensors["thinker.lm_head.weight"]
    tensors["thinker.audio_tower.extra.weight"] = torch.zeros(2)
    tensors["thinker.model.norm.weight"] = torch.zeros(3)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        load_aligner(tmp_path)
    text = str(err.value)
    assert "missing keys (1): thinker.lm_head.weight" in text
    assert "unexpected keys (1): thinker.audio_tower.extra.weight" in text
    assert f"thinker.model.norm.weight: checkpoint [3] vs model [{aligner.cfg.text.hidden_size}]" in text


@pytest.mark.parametrize("path, value, field", [
    (("thinker_config", "classify_num"), 0, "thinker_config.classify_num"),
    (("timestamp_token_id",), None, "timestamp_token_id"),
    (("thinker_config", "audio_config", "output_dim"), 32, "output_dim"),
    (("thinker_config", "model_type"), "qwen3_asr", "thinker_config.model_type"),
])
def test_config_names_field(path: tuple[str, ...], value: object, field: str) -> None:
    cfg = json.loads((CHECKPOINT / "config.json").read_text())
    node = cfg
    for p in path[:-1]:
        node = node[p]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    with pytest.raises(ConfigError, match=field):
        ForcedAlignerConfig.from_dict(cfg)


def test_head_is_exact_linear(aligner: ForcedAligner) -> None:
    assert isinstance(aligner.lm_head, exact.Linear) and aligner.lm_head.bias is None
