"""One real local Ray cluster (2 CPUs, no dashboard) for every cluster test, started once and shut down after
the last of them (this directory is a package, so this conftest never shadows the suite's own)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="package")
def ray_cluster() -> Any:
    ray = pytest.importorskip("ray", reason="the cluster tests need Ray: pip install -e \".[ray,server]\"")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()
