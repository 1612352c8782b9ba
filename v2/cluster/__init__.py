"""Past one GPU, on Ray: `RolloutPool` (rollouts over N runtime replicas) and serving replicas (serve.py).

Owns: the package's entry names, and the one place that says Ray is missing. Ray is an optional extra
(`pip install -e ".[ray,server]"`, as the README says); nothing outside this package imports it, so the core loads without it.
Must not know: the runtime's internals.
"""

from __future__ import annotations

try:
    import ray  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only where Ray is absent
    raise ImportError("v2.cluster needs Ray, an optional extra: pip install -e \".[ray,server]\" "
                      "(or pip install 'ray[serve]')") from e

from v2.cluster.batch import PoolBatch, RolloutCancelled
from v2.cluster.pool import RolloutPool

__all__ = ["PoolBatch", "RolloutCancelled", "RolloutPool"]
