"""The launch counter of Qwen3-Omni's steps at the release's dimensions (meta device, no GPU): the release config
reads as the README's table, each step launches the MoE block's kernels once per layer, the routed experts
always in the grouped kernels' three launches (never a launch per expert), and each step is within its aim
(thinker token <= 400, talker frame <= 900)."""

from __future__ import annotations

import json

from v2.models.qwen3_omni import launches
from v2.models.qwen3_omni.release import release_config


def test_the_release_config_has_the_release_shapes() -> None:
    cfg = release_config()
    t, tk = cfg.thinker.text, cfg.talker
    assert tk is not None and cfg.code_predictor is not None
    assert (t.decoder.num_layers, t.decoder.hidden_size, t.moe.num_experts, t.moe.top_k, t.moe.intermediate_size,
            t.moe.shared_intermediate_size) == (48, 2048, 128, 8, 768, 0)
    assert (tk.text.decoder.num_layers, tk.hidden_size, tk.text.moe.num_experts, tk.text.moe.top_k,
            tk.text.moe.intermediate_size, tk.text.moe.shared_intermediate_size) == (20, 1024, 128, 6, 384, 768)
    assert cfg.code_predictor.decoder.num_layers == 5 and tk.num_code_groups == 16


def test_the_steps_launch_the_grouped_expert_kernels_once_per_layer(capsys) -> None:
    assert launches.main(["--buckets", "1", "3"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["dims"] == "release" and out["device"] == "meta" and [r["bucket"] for r in out["buckets"]] == [1, 3]
    for row in out["buckets"]:
        # the thinker's decode rows route inside the post-attention add + norm launch; the talker's block routes alone
        for name, layers, route in (("thinker", 48, "triton:add_norm_route"), ("talker", 20, "triton:route")):
            step = row[name]
            for kernel in (route, "triton:expert_gate_up", "triton:expert_down", "triton:expert_combine"):
                assert step["ops"][kernel] == layers, (name, kernel)
            for kernel in ("triton:route", "triton:expert_gate_up", "triton:expert_down", "triton:expert_combine"):
                assert step["moe_ops"][kernel] == 1, (name, kernel)
            assert step["launches"] == sum(step["ops"].values()) and step["aim"] == launches.AIMS[name]
            assert step["launches"] <= step["aim"], (name, step["launches"])  # 400 / 876 on 2026-12-07
    assert out["buckets"][0]["thinker"]["launches"] == out["buckets"][1]["thinker"]["launches"]  # no per-row launches


def test_the_layer_scaled_count_equals_the_whole_count(oconfig, monkeypatch) -> None:
    """`--device cuda`'s arithmetic, on the CPU with the dispatch counter and the kernels in the interpreter: the
    tiny checkpoint's shapes counted with 1 and 2 layers and scaled give the count of its whole stacks."""
    from v2.models import kernels
    from v2.models.qwen3_omni.config import Qwen3OmniConfig

    cfg = Qwen3OmniConfig.from_dict(oconfig)
    monkeypatch.setattr(kernels, "FORCE", True)
    assert (cfg.thinker.text.decoder.num_layers, cfg.talker and cfg.talker.text.decoder.num_layers) == (4, 2)
    scaled = launches.cuda_counts(cfg, [2], 128, device="cpu", count=lambda fn: launches.counted(fn, True))[0]
    th, tk = launches.build(cfg, "cpu")
    for name, (step, _) in (("thinker", launches.thinker_step(th, 2, 128)), ("talker", launches.talker_step(tk, 2, 128))):
        assert scaled[name]["launches"] == sum(launches.counted(step, True).values()), name
