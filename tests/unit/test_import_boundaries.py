"""The plain-data and scheduling parts of the package import without torch (numpy is allowed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

TORCH_FREE = ["v2.contracts", "v2.sampling_settings", "v2.card", "v2.families.moss_tts_local", "v2.families.moss_tts_local.ar_decode", "v2.families.moss_tts_local.vocoder",
              "v2.families.moss_tts_local.encode", "v2.runtime.scheduler", "v2.runtime.paging", "v2.runtime.blocks", "v2.rl"]


def loads_torch(*modules: str) -> bool:
    code = f"import sys\nimport {', '.join(modules)}\nprint('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip() == "True"


def test_the_torch_free_modules_together_load_no_torch():
    assert not loads_torch(*TORCH_FREE)


@pytest.mark.parametrize("module", TORCH_FREE)
def test_each_torch_free_module_alone_loads_no_torch(module):
    assert not loads_torch(module)


def test_the_check_sees_torch_where_it_is_loaded():
    assert loads_torch("v2.models.sampling")
