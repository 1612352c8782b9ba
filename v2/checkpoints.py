"""Where a checkpoint lives: a directory on disk, or a Hugging Face hub repo id found in the local hub cache.

Owns: telling a directory from a repo id (`org/name`), looking a repo id up in the hub's cache through
`huggingface_hub` (so `HF_HOME`, `HF_HUB_CACHE` and `HF_HUB_OFFLINE` mean what they mean to every hub
tool) without ever reaching the network, and the one-line error that names the repo id, the path looked at
and the command that downloads it. A download is the user's explicit step: a runtime never starts a
multi-gigabyte transfer by itself.
Must not know: models, the card schema, the runtime.
"""

from __future__ import annotations

import re
from pathlib import Path

# a hub repo id: `org/name`, letters, digits, '-', '_', '.' (the hub's own rule, without its length limit)
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
# a checkpoint directory holds at least this (both the model's and the codec's releases do)
_MARKER = "config.json"


class CheckpointNotFound(FileNotFoundError):
    """A checkpoint is neither a directory nor in the hub cache; the message says how to get it."""


def is_repo_id(source: str) -> bool:
    """`org/name` as the hub spells repo ids (a path such as `./x/y` or `/x/y` is not one)."""
    return bool(_REPO_ID.match(source)) and ".." not in source and "--" not in source


def download_command(repo_id: str) -> str:
    """The one command that puts `repo_id` into the hub cache where `resolve_checkpoint` finds it."""
    return f"hf download {repo_id}"


def hub_cache_dir() -> Path:
    """The hub cache huggingface_hub uses now (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def repo_cache_path(repo_id: str) -> Path:
    """The folder of `repo_id` in the hub cache (models--org--name), whether or not it exists."""
    return hub_cache_dir() / f"models--{repo_id.replace('/', '--')}"


def resolve_checkpoint(source: str | Path) -> Path:
    """The directory a card's `checkpoint` (or a --checkpoint override) names.

    An existing directory wins (a relative path is taken from the working directory); otherwise a repo id is
    looked up in the hub cache, offline. Raises `CheckpointNotFound` with the repo id, the path looked at and
    the download command, or with the directory that does not exist.
    """
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    text = str(source)
    if path.exists():
        raise CheckpointNotFound(f"checkpoint {text!r}: {path.resolve()} is a file, not a checkpoint directory")
    if not is_repo_id(text):
        raise CheckpointNotFound(f"checkpoint directory not found: {path.resolve()}")
    return _from_hub_cache(text)


def _from_hub_cache(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    looked = repo_cache_path(repo_id)
    try:
        snapshot = Path(snapshot_download(repo_id, local_files_only=True))
    except LocalEntryNotFoundError:
        raise CheckpointNotFound(f"checkpoint {repo_id} is not downloaded: no such directory here and not in the "
                                 f"Hugging Face cache (looked in {looked}); download it with: "
                                 f"{download_command(repo_id)}") from None
    if not (snapshot / _MARKER).is_file():
        raise CheckpointNotFound(f"checkpoint {repo_id} is incomplete in the Hugging Face cache ({snapshot} has no "
                                 f"{_MARKER}); download it again with: {download_command(repo_id)}")
    return snapshot
