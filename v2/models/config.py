"""Config pieces every model's config reader shares: the error, the field readers, the decoder sizes.

Owns: `ConfigError` (a `config.json` field missing or invalid, the message naming the field), the dotted-path
field readers (`_get`, `_int`, `_float`: each refusal names the path) and `BackboneConfig`, the sizes of a
Qwen3 decoder stack (the architecture of `v2/models/qwen3.py`, which several families' models use: the name
is the architecture's, not a family's). Each model package reads its own release schema with these.
Must not know: any release schema or family, weights, devices, the runtime, cards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


class ConfigError(ValueError):
    """A config.json field is missing or invalid; the message names the field."""


_MISSING = object()


def _get(d: Mapping[str, Any], path: str, default: Any = _MISSING) -> Any:
    node: Any = d
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            if default is _MISSING:
                raise ConfigError(f"config.json: missing field '{path}'")
            return default
        node = node[part]
    return node


def _int(d: Mapping[str, Any], path: str, default: Any = _MISSING, minimum: int = 1) -> int:
    value = _get(d, path, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"config.json: field '{path}' must be an integer >= {minimum}, got {value!r}")
    return value


def _float(d: Mapping[str, Any], path: str, default: Any = _MISSING) -> float:
    value = _get(d, path, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"config.json: field '{path}' must be a positive number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class BackboneConfig:
    """Qwen3 decoder sizes (the architecture of v2/models/qwen3.py)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
