"""MOSS-TTS-Local's weight names for updates: the release layout, aliases and safetensors files.

Owns: `NAMES`, the `v2.runtime.weight_updates.WeightNames` of this family (parameter names and the
release checkpoint's keys, fused parameters' parts included; tied aliases; reading checkpoint files).
Must not know: the engine, requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from torch import Tensor, nn

from v2.models.loader import Part, canonical_name, release_layout, tied_target
from v2.models.weights import open_weights, read_tensor, stored_by_file, stored_shapes, weight_files


class MossWeightNames:
    def layout(self, model: nn.Module) -> dict[str, Any]:
        layout = release_layout(model)
        for name, p in model.named_parameters():
            layout.setdefault(name, Part(name, 0, tuple(p.shape)))
        return layout

    def canonical(self, name: str) -> str:
        return canonical_name(name)

    def tied(self, name: str) -> str | None:
        return tied_target(name)

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


NAMES = MossWeightNames()
