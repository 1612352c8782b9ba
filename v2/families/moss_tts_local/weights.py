"""MOSS-TTS-Local's weight names for updates: the release layout, aliases and safetensors files.

Owns: `NAMES`, the `v2.runtime.weight_updates.WeightNames` of this family (parameter names and the
release checkpoint's keys, fused parameters' parts included; tied aliases; reading checkpoint files).
Must not know: the engine, requests.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from v2.models.moss_tts_local.loader import Part, canonical_name, release_layout, tied_target
from v2.models.weights import SafetensorsFiles


class MossWeightNames(SafetensorsFiles):
    def layout(self, model: nn.Module) -> dict[str, Any]:
        layout = release_layout(model)
        for name, p in model.named_parameters():
            layout.setdefault(name, Part(name, 0, tuple(p.shape)))
        return layout

    def canonical(self, name: str) -> str:
        return canonical_name(name)

    def tied(self, name: str) -> str | None:
        return tied_target(name)


NAMES = MossWeightNames()
