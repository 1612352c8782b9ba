"""The model family: MOSS-TTS-Local (Qwen3 backbone + local transformer) and its parts."""

from v2.models.config import ConfigError, MossTTSLocalConfig
from v2.models.weights import CheckpointError
from v2.models.moss_tts_local import FrameOutput, MossTTSLocal
from v2.models.kv_cache import KVCache, PagedKVCache
from v2.models.sampling import SamplingTensors
from v2.sampling_settings import HeadSampling, SamplingSettings

__all__ = [
    "CheckpointError", "ConfigError", "FrameOutput", "HeadSampling", "KVCache", "MossTTSLocal",
    "MossTTSLocalConfig", "PagedKVCache", "SamplingSettings", "SamplingTensors",
]
