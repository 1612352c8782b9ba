"""Ray is an optional extra: the core imports without it, and `v2.cluster` says how to install it."""

from __future__ import annotations

import subprocess
import sys

BLOCK_RAY = "import sys; sys.modules['ray'] = None\n"  # any `import ray` now raises ImportError


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_RAY + code], capture_output=True, text=True, timeout=120)


def test_the_core_imports_without_ray():
    done = run("import v2.runtime.engine, v2.rl.trajectory, v2.families.moss_tts_local.recompute, v2.rl.batch, v2.cli, v2.examples.grpo, v2.bench.rollout\n"
               "assert 'ray' not in [m for m in sys.modules if sys.modules[m] is not None]")
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_cluster_package_names_the_extra_when_ray_is_missing():
    done = run("import v2.cluster")
    assert done.returncode != 0
    assert 'pip install -e ".[ray,server]"' in done.stderr
