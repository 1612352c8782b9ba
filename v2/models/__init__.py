"""The networks: one package per model (`v2/models/<name>/`, a family's experts) and the shared building
blocks they are made of (`exact`, `qwen3`: the Qwen3 decoder stack, `rope`, `kv_cache`, `sampling`,
`window_attention`, `audio_in`, `weights`, `config`, `module_list`, `kernels/`). Nothing here names a family."""

from v2.models.config import ConfigError
from v2.models.weights import CheckpointError
from v2.models.kv_cache import KVCache, PagedKVCache
from v2.models.sampling import SamplingTensors
from v2.sampling_settings import HeadSampling, SamplingSettings

__all__ = [
    "CheckpointError", "ConfigError", "HeadSampling", "KVCache", "PagedKVCache", "SamplingSettings",
    "SamplingTensors",
]
