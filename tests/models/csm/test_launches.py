"""`python -m v2.bench.launches --family csm`: a CSM-1B frame step at the release's dims routes every layer to its
kernels: the backbone's decode row and each depth step through `norm_linear` (each residual add and norm inside the
matmul that reads it), the RoPE kernel without q/k norms, the frame attention, one draw a codebook."""

from __future__ import annotations

import json

import pytest

from v2.bench.launches import main as launches
from v2.families.csm.bench.launches import RELEASE
from v2.models import kernels


def test_one_frame_step_routes_every_layer_to_its_kernel(capsys):
    if kernels.triton is None:
        pytest.skip("needs triton")
    assert launches(["--family", "csm", "--buckets", "2", "--context", "200"]) == 0
    captured = capsys.readouterr()
    row = json.loads(captured.out.strip().splitlines()[-1])["buckets"][0]
    backbone, depth = RELEASE["num_hidden_layers"], RELEASE["depth_decoder_config"]["num_hidden_layers"]
    steps = RELEASE["num_codebooks"] - 1  # depth steps a frame (the first one takes two positions)
    assert row["triton"] == {
        "norm_linear": 2 * backbone + steps * (2 * depth + 1),  # q/k/v and gate/up a layer; each depth head
        "qk_rope": backbone, "split": backbone,  # the backbone decode row's RoPE + cache write, decode attention
        "rms_norm": 1,  # the backbone's last add with its final norm
        "frame_attention": steps * depth,
        "sample": steps + 1}  # one launch a draw
    # cuBLAS: o_proj and down_proj of every layer, lm_head, the first depth rows' projection
    assert row["kernels_ops"]["mm"] == 2 * backbone + steps * 2 * depth + 2
    for label in ("torch", "kernels"):
        assert sum(row[f"{label}_parts"].values()) == row[f"{label}_launches"] == sum(row[f"{label}_ops"].values())
    assert row["kernels_parts"]["backbone"] < row["torch_parts"]["backbone"] / 8
    assert row["kernels_parts"]["depth_decoder"] < row["torch_parts"]["depth_decoder"] / 12
    assert row["kernels_launches"] <= 850, row["kernels_launches"]
