"""Qwen3-TTS's weight names for updates: the release layout (fused q/k/v and gate/up split per decoder) and
the safetensors files.

Owns: `NAMES`, the `v2.runtime.weight_updates.WeightNames` of this family (every release key and the
parameter rows it fills; no tied aliases: the release's heads are separate tensors).
Must not know: the engine, requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from torch import Tensor, nn

from v2.models.qwen3_tts.loader import release_layout
from v2.models.weights import open_weights, read_tensor, stored_by_file, stored_shapes, weight_files


class Qwen3WeightNames:
    def layout(self, model: nn.Module) -> dict[str, Any]:
        return release_layout(model)

    def canonical(self, name: str) -> str:
        return name

    def tied(self, name: str) -> str | None:
        return None

    def files(self, path: Path) -> Any:
        return weight_files(path)

    def shapes(self, files: Any) -> dict[str, tuple[int, ...]]:
        return stored_shapes(files)

    def by_file(self, files: Any) -> Iterable[tuple[Any, list[str]]]:
        return stored_by_file(files)

    def open(self, file: Any) -> Any:
        return open_weights(file)

    def read(self, handle: Any, key: str, file: Any) -> Tensor:
        return read_tensor(handle, key, file)


NAMES = Qwen3WeightNames()
