"""Checkpoints by hub repo id, found offline in a Hugging Face cache laid out in a temporary folder.

The cache holds the tiny fixture checkpoints under the release repo ids, in the hub's layout
(models--org--name/refs/main naming a revision, snapshots/<rev>/ holding the files as links). Sockets are
closed for the in-process tests and HF_HUB_OFFLINE is set for the subprocesses: nothing reaches a network.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import CODEC_DIR, MODEL_DIR
from v2.card import CARDS_DIR, build_codec, build_model, load_card
from v2.checkpoints import CheckpointNotFound, is_repo_id, resolve_checkpoint
from v2.cli import main

MODEL_ID, CODEC_ID = "OpenMOSS-Team/MOSS-TTS-Local-Transformer-v1.5", "OpenMOSS-Team/MOSS-Audio-Tokenizer-v2"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def lay_out(hub: Path, repo_id: str, files: Path) -> Path:
    """`files` as the main revision of `repo_id` in the hub cache `hub`; the snapshot folder."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for f in files.iterdir():
        (snapshot / f.name).symlink_to(f.resolve())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HF_HOME in use by this process (huggingface_hub reads its cache path at import)."""
    from huggingface_hub import constants

    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a test tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    return home


def hub_card(tmp_path: Path) -> Path:
    """The tiny card's loops and tokenizer with the experts' checkpoints given as the release repo ids."""
    text = (CARDS_DIR / "moss_tts_local_tiny.toml").read_text()
    text = text.replace('checkpoint = "seed:tts"', f'checkpoint = "{MODEL_ID}"')
    text = text.replace('checkpoint = "seed:codec"', f'checkpoint = "{CODEC_ID}"')
    path = tmp_path / "hub_card.toml"
    path.write_text(text)
    return path


def test_the_release_card_names_the_hub_repo_ids():
    experts = load_card("moss_tts_local_v1_5").experts
    assert experts.backbone.checkpoint == experts.local_transformer.checkpoint == MODEL_ID
    assert experts.vocoder.checkpoint == CODEC_ID
    assert is_repo_id(MODEL_ID) and is_repo_id(CODEC_ID)
    assert not any(is_repo_id(p) for p in ("/abs/dir", "./a/b", "a/b/c", "a", "a/../b", "seed:tts"))


def test_the_release_card_loads_its_experts_from_the_hub_cache(hf_home):
    model_snapshot = lay_out(hf_home / "hub", MODEL_ID, MODEL_DIR / "checkpoint")
    lay_out(hf_home / "hub", CODEC_ID, CODEC_DIR / "checkpoint")
    assert resolve_checkpoint(MODEL_ID) == model_snapshot
    card = load_card("moss_tts_local_v1_5")
    model, codec = build_model(card, dtype=torch.float32), build_codec(card)
    from v2.models.moss_tts_local.model import MossTTSLocal

    direct = MossTTSLocal.from_pretrained(MODEL_DIR / "checkpoint")
    for (name, x), (_, y) in zip(model.state_dict().items(), direct.state_dict().items()):
        assert x.equal(y), name
    assert codec.sample_rate == 48000


def test_a_missing_checkpoint_names_the_repo_the_path_and_the_download_command(hf_home):
    with pytest.raises(CheckpointNotFound) as caught:
        resolve_checkpoint(CODEC_ID)
    message = str(caught.value)
    looked = hf_home / "hub" / "models--OpenMOSS-Team--MOSS-Audio-Tokenizer-v2"
    assert CODEC_ID in message and str(looked) in message and f"hf download {CODEC_ID}" in message
    assert "\n" not in message


def test_an_incomplete_snapshot_is_refused_with_the_download_command(hf_home, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    lay_out(hf_home / "hub", MODEL_ID, empty)
    with pytest.raises(CheckpointNotFound, match=f"incomplete.*hf download {MODEL_ID}"):
        resolve_checkpoint(MODEL_ID)


def test_a_local_directory_still_works(hf_home, monkeypatch, tmp_path, capsys):
    assert resolve_checkpoint(MODEL_DIR / "checkpoint") == MODEL_DIR / "checkpoint"
    monkeypatch.chdir(MODEL_DIR)
    assert resolve_checkpoint("checkpoint").resolve() == (MODEL_DIR / "checkpoint").resolve()
    with pytest.raises(CheckpointNotFound, match="checkpoint directory not found: /no/such/dir"):
        resolve_checkpoint("/no/such/dir")
    out = tmp_path / "x.wav"  # a hub-id card overridden by directories: the cache is never consulted
    assert main(["synth", "Hi.", "-o", str(out), "-q", "--card", str(hub_card(tmp_path)), "--min-frames", "3",
                 "--max-frames", "4", "--checkpoint", str(MODEL_DIR / "checkpoint"),
                 "--codec-checkpoint", str(CODEC_DIR / "checkpoint")]) == 0
    assert json.loads(capsys.readouterr().out)["frames"] >= 3


def _cli(args: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run([sys.executable, "-m", "v2", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_command_line_finds_hub_ids_through_hf_home(tmp_path):
    home, card = tmp_path / "hf", hub_card(tmp_path)
    args = ["synth", "Hello.", "-o", "speech.wav", "--card", str(card), "--min-frames", "3", "--max-frames", "4"]
    missing = _cli(args, home, tmp_path)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.splitlines() == [missing.stderr.strip()] and "Traceback" not in missing.stderr
    assert missing.stderr.startswith(f"error: checkpoint {MODEL_ID} is not downloaded")
    assert str(home / "hub" / "models--OpenMOSS-Team--MOSS-TTS-Local-Transformer-v1.5") in missing.stderr
    assert f"hf download {MODEL_ID}" in missing.stderr
    lay_out(home / "hub", MODEL_ID, MODEL_DIR / "checkpoint")
    lay_out(home / "hub", CODEC_ID, CODEC_DIR / "checkpoint")
    done = _cli(args, home, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["frames"] >= 3 and (tmp_path / "speech.wav").is_file()
