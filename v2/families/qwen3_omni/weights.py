"""Qwen3-Omni's weight names for updates: the release keys of the thinker, talker and code2wav as stored (fused
q/k/v, gate/up and each expert's rows of a stacked expert parameter placed by the models' own loader).

Owns: `NAMES`, the `v2.runtime.weight_updates.WeightNames` of this family: `layout` of the family's weights (a
module dict of the built parts) is each part's `release_layout` under its part's name; the release's vision
tower is stored in the same files and is neither read nor offered.
Must not know: the engine, requests.
"""

from __future__ import annotations

from torch import nn

from v2.models.qwen3_omni.loader import NOT_MODELLED, Slot, release_layout
from v2.models.weights import ReleaseNames

(_VISION,) = NOT_MODELLED


STORED = {"talker": "talker"}  # a part whose release keys fill one of its children (the talker's decoder and
# code predictor are `FedTalker.talker`, as the loader fills them), by the part's name


def parts_layout(model: nn.Module) -> dict[str, Slot]:
    """Release key -> its slot, for every built part of `model` (a module dict: "thinker", "talker", "code2wav")."""
    out: dict[str, Slot] = {}
    for name, part in model.named_children():
        inner = STORED.get(name)
        root, stored = (f"{name}.{inner}.", part.get_submodule(inner)) if inner else (f"{name}.", part)
        out |= {f"{name}.{key}": Slot(root + slot.param, slot.expert, slot.start, slot.shape)
                for key, slot in release_layout(stored).items()}
    return out


NAMES = ReleaseNames(parts_layout, skip=_VISION)
