"""CSM's weight names for updates: the release layout (q/k/v and gate/up fused per decoder, split with each
decoder's sizes) and the safetensors files, less the codec's `codec_model.*` keys (Mimi is not updated).

Owns: `NAMES`, the `v2.runtime.weight_updates.WeightNames` of this family (`v2.models.weights.ReleaseNames`:
the release's keys are the names).
Must not know: the engine, requests.
"""

from __future__ import annotations

from v2.models.csm.loader import CODEC_PREFIX, release_layout
from v2.models.weights import ReleaseNames

NAMES = ReleaseNames(release_layout, skip=CODEC_PREFIX)
