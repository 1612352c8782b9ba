"""The Triton kernels (decode attention, norms, RoPE, SwiGLU, fused sampling, MoE routing and grouped experts)
and whether they run on a device.

Owns: the one switch. They run on CUDA when Triton imports; `FORCE` runs them on any device (the tests
set it on the CPU, where Triton's interpreter executes them). Everywhere else the torch paths serve. The
layers' kernels (norms, RoPE, SwiGLU, the local attention) also need autograd off (`inference_kernels`);
decode attention and sampling are never differentiated. The kernels live in this package's modules
(`decode_attention`, `rms_norm`, `layer_norm`, `swiglu`, `qk_rope`, `local_attention`, `frame_attention`,
`norm_linear`, `sample`, `moe_route`, `grouped_experts`; they take `triton` and `tl` from here); importing this
package loads none of them.
Must not know: what the kernels compute, the model, requests.
"""

from __future__ import annotations

import torch

try:  # the one import of Triton: the kernel modules take `triton` and `tl` from here
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - the torch paths serve without Triton
    triton = tl = None

FORCE = False


def kernels_on(device: torch.device) -> bool:
    return triton is not None and (device.type == "cuda" or FORCE)


def inference_kernels(device: torch.device) -> bool:
    """Kernels on for `device` and autograd not recording: the layers' kernels have no backward, so a
    differentiable pass (the RL recompute) takes the torch forms."""
    return kernels_on(device) and not torch.is_grad_enabled()
