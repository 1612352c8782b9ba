"""Qwen3-TTS's weight names for updates: the release layout (fused q/k/v and gate/up split per decoder) and
the safetensors files.

Owns: `NAMES`, the `v2.runtime.weight_updates.WeightNames` of this family (`v2.models.weights.ReleaseNames`:
every release key and the parameter rows it fills; no tied aliases: the release's heads are separate
tensors).
Must not know: the engine, requests.
"""

from __future__ import annotations

from v2.models.qwen3_tts.loader import release_layout
from v2.models.weights import ReleaseNames

NAMES = ReleaseNames(release_layout)
