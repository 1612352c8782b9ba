"""The mixture-of-experts block of Qwen3-Omni's thinker and talker (release keys `mlp.*`).

Owns: the router (`gate`: softmax over every expert in float32, the top-k by probability with ties to the
lowest index, renormalised to sum 1 when `norm_topk_prob`), the SwiGLU experts stored stacked
(`experts.gate_up_proj` [E, 2I, H] = cat(gate, up), `experts.down_proj` [E, H, I]: transformers 5.x's fused
layout; the release stores them per expert and the loader fills the stacks), and the talker's optional shared
expert gated by `sigmoid(shared_expert_gate . x)`.

Exact on the CPU (designs/model.md, "Exact on every CPU" and "Qwen3-Omni"): routing is per row; each expert
runs `exact.linear` on the rows routed to it (fixed-shape tiles, so a row's output does not depend on which
other rows share the expert), and a row's k expert outputs are summed in its own rank order (highest
probability first), never in expert or batch order. So a row's result is the same alone or in any batch.
Where the Triton kernels run (CUDA, autograd off: `kernels.inference_kernels`), the block is `_kernels`: the
router's matmul and the routing in one launch (kernels/moe_route.py), and the grouped-expert kernel
(kernels/grouped_experts.py: each expert's slots taken in slot order inside the kernel, three launches whatever
the routing, a fixed reduction order, so batched == alone there too; the shared expert's gated sum added in its
last launch); `routed` is the part after the routing, for a decoder that routed in its own launch
(`moe_route.add_norm_route`); elsewhere off the CPU (a differentiable pass, no Triton) the same loop over experts runs with
F.linear. On the CPU the loop runs unchanged (the kernels' tests force them there, through Triton's interpreter).
Must not know: decoders, attention, caches, checkpoints, requests.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from v2.models import exact, kernels
from v2.models.config import BackboneConfig
from v2.models.kernels.grouped_experts import grouped_experts
from v2.models.kernels.moe_route import route_fused
from v2.models.qwen3 import Qwen3MLP
from v2.models.qwen3_omni.config import MoeConfig


class Experts(nn.Module):
    """E SwiGLU experts, stacked: gate_up_proj [E, 2I, H], down_proj [E, H, I]."""

    def __init__(self, num_experts: int, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.intermediate = intermediate
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * intermediate, hidden))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, intermediate))

    def one(self, e: int, x: Tensor) -> Tensor:
        """Expert e on rows x [n, H] -> [n, H]."""
        gate, up = exact.linear(x, self.gate_up_proj[e]).chunk(2, dim=-1)  # [n, I] each
        return exact.linear(exact.silu(gate) * up, self.down_proj[e])


def route(logits: Tensor, top_k: int, renormalise: bool) -> tuple[Tensor, Tensor]:
    """Router logits [N, E] -> (weights [N, k] float32, experts [N, k] int64), highest probability first.
    softmax over all E, top-k (ties: lowest index first), then weights / their sum when `renormalise`."""
    probs = torch.softmax(logits.float(), dim=-1)  # [N, E]: a row-wise reduction over a fixed length
    # a stable sort, not torch.topk: topk's order among equal values is not specified (CPU: not the lowest index)
    weights, experts = torch.sort(probs, dim=-1, descending=True, stable=True)  # [N, E]
    weights, experts = weights[:, :top_k], experts[:, :top_k]  # [N, k]
    if renormalise:
        weights = weights / exact.halving_sum(weights, -1)[:, None]
    return weights, experts


class SparseMoe(nn.Module):
    """Router + experts (+ the gated shared expert when `cfg.shared_intermediate_size` > 0). x [..., H] -> [..., H]."""

    def __init__(self, cfg: MoeConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.gate = exact.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = Experts(cfg.num_experts, cfg.hidden_size, cfg.intermediate_size)
        self.shared_expert: Qwen3MLP | None = None
        self.shared_expert_gate: exact.Linear | None = None
        if cfg.shared_intermediate_size:
            self.shared_expert = Qwen3MLP(_swiglu_sizes(cfg.hidden_size, cfg.shared_intermediate_size))
            self.shared_expert_gate = exact.Linear(cfg.hidden_size, 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        lead, h = x.shape[:-1], x.shape[-1]
        rows = x.reshape(-1, h)  # [N, H]
        if kernels.inference_kernels(rows.device):
            return self._kernels(rows).view(*lead, h)
        weights, experts = route(self.gate(rows), self.cfg.top_k, self.cfg.norm_topk_prob)  # [N, k] each
        out = self._experts(rows, weights.to(rows.dtype), experts)  # [N, H]
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            z = self.shared_expert_gate(rows)  # [N, 1]
            out = out + self.shared_expert(rows) / (1.0 + torch.exp(-z))  # sigmoid(z) * shared, the same bits anywhere
        return out.view(*lead, h)

    def _kernels(self, rows: Tensor) -> Tensor:
        """The block through the Triton kernels: rows [N, H] -> [N, H]. The router's matmul and the routing in
        one launch (`route_fused`), the routed experts and their sum in three (`grouped_experts`, which also adds
        the gated shared expert), the shared expert's own matmuls and its gate's."""
        weights, experts = route_fused(rows, self.gate.weight, self.cfg.top_k, self.cfg.norm_topk_prob)
        return self.routed(rows, weights, experts)

    def routed(self, rows: Tensor, weights: Tensor, experts: Tensor) -> Tensor:
        """The block after its routing, through the kernels: rows [N, H], weights [N, k] (rows' dtype), experts
        [N, k] -> [N, H] (a caller that routed with `add_norm_route` comes in here)."""
        shared = z = None
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            shared, z = self.shared_expert(rows), self.shared_expert_gate(rows)  # [N, H], [N, 1]
        return grouped_experts(rows, weights, experts, self.experts.gate_up_proj, self.experts.down_proj,
                               shared=shared, shared_gate=z)

    def _experts(self, rows: Tensor, weights: Tensor, experts: Tensor) -> Tensor:
        """sum_k weights[n, k] * expert_{experts[n, k]}(rows[n]) for each row n, the k terms added in rank order
        (the torch form; `_kernels` is the same block through the grouped-expert kernel)."""
        n, k = experts.shape
        outs = rows.new_zeros(n, k, rows.shape[-1])  # [N, k, H]: row n's rank-r expert output at [n, r]
        flat = experts.reshape(-1)  # [N k]
        for e in torch.unique(flat).tolist():
            where = (flat == e).nonzero().squeeze(1)  # slots (n * k + r) routed to e
            y = self.experts.one(e, rows.index_select(0, where // k))  # [m, H]
            outs.view(n * k, -1).index_copy_(0, where, y)
        total = outs[:, 0] * weights[:, :1]
        for r in range(1, k):  # a fixed order per row: its ranks
            total = total + outs[:, r] * weights[:, r : r + 1]
        return total


def _swiglu_sizes(hidden: int, intermediate: int) -> BackboneConfig:
    """The sizes Qwen3MLP reads (hidden, intermediate); the attention fields are unused by an MLP."""
    return BackboneConfig(hidden_size=hidden, num_layers=1, num_heads=1, num_kv_heads=1, head_dim=2,
                          intermediate_size=intermediate, vocab_size=1, rms_norm_eps=1e-6, rope_theta=1.0)
