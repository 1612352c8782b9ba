"""`persist.ParamVersions`: a kept pass is made again when a parameter is written in place or replaced, and when a
submodule holding parameters is replaced in its parent (whose new parameters the old lists never held)."""

from __future__ import annotations

import torch
from torch import nn

from v2.models.persist import ParamVersions


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.ModuleList([nn.Embedding(8, 4), nn.Embedding(8, 4)]))


def test_a_first_look_is_a_change_and_a_second_is_not():
    m, v = model(), ParamVersions()
    assert v.changed(m) and not v.changed(m)


def test_an_in_place_write_and_a_replaced_parameter_are_changes():
    m, v = model(), ParamVersions()
    v.changed(m)
    with torch.no_grad():
        m[0].weight.mul_(2)
    assert v.changed(m) and not v.changed(m)
    m[0].bias = nn.Parameter(torch.zeros(4))
    assert v.changed(m) and not v.changed(m)


def test_a_submodule_replaced_in_a_module_list_is_a_change():
    m, v = model(), ParamVersions()
    v.changed(m)
    m[1][1] = nn.Embedding(8, 4)  # its parameters are new tensors the old lists never held
    assert v.changed(m) and not v.changed(m)
    with torch.no_grad():
        m[1][1].weight.add_(1)  # and the new module's parameters are watched from then on
    assert v.changed(m)
