"""CSM's weight names for updates: the release layout (q/k/v and gate/up fused per decoder, split with each
decoder's sizes) and the safetensors files, less the codec's `codec_model.*` keys (Mimi is not updated).

Owns: `NAMES`, the `v2.runtime.weight_updates.WeightNames` of this family.
Must not know: the engine, requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from torch import nn

from v2.models.csm.loader import CODEC_PREFIX, release_layout
from v2.models.weights import SafetensorsFiles


class CsmWeightNames(SafetensorsFiles):
    def layout(self, model: nn.Module) -> dict[str, Any]:
        return release_layout(model)

    def canonical(self, name: str) -> str:
        return name

    def tied(self, name: str) -> str | None:
        return None

    def shapes(self, files: Any) -> dict[str, tuple[int, ...]]:
        return {k: s for k, s in super().shapes(files).items() if not k.startswith(CODEC_PREFIX)}

    def by_file(self, files: Any) -> Iterator[tuple[Path, list[str]]]:
        for file, keys in super().by_file(files):
            keys = [k for k in keys if not k.startswith(CODEC_PREFIX)]
            if keys:
                yield file, keys


NAMES = CsmWeightNames()
