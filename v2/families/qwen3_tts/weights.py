"""Qwen3-TTS's weight names for updates: the release layout (fused q/k/v and gate/up split per decoder) and
the safetensors files.

Owns: `NAMES`, the `v2.runtime.weight_updates.WeightNames` of this family (every release key and the
parameter rows it fills; no tied aliases: the release's heads are separate tensors).
Must not know: the engine, requests.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from v2.models.qwen3_tts.loader import release_layout
from v2.models.weights import SafetensorsFiles


class Qwen3WeightNames(SafetensorsFiles):
    def layout(self, model: nn.Module) -> dict[str, Any]:
        return release_layout(model)

    def canonical(self, name: str) -> str:
        return name

    def tied(self, name: str) -> str | None:
        return None


NAMES = Qwen3WeightNames()
