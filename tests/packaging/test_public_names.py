"""`import v2` is cheap (no torch) and its public names load on first use; `v2 cards` and `--help` need no torch."""

from __future__ import annotations

import subprocess
import sys

import v2


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_import_v2_loads_no_torch_and_the_names_resolve():
    done = run("import sys, v2\n"
               "assert 'torch' not in sys.modules, 'import v2 loaded torch'\n"
               "from v2 import AudioChunk, OverloadedError, RequestError, Runtime, SpeechParams, SpeechRequest, "
               "SpeechResult, Trajectory\n"
               "assert Runtime.__module__ == 'v2.runtime.runtime' and SpeechParams.__module__ == 'v2.params'\n"
               "assert SpeechRequest.__module__ == 'v2.families.moss_tts_local.request'\n"
               "assert RequestError.__module__ == OverloadedError.__module__ == 'v2.errors'\n"
               "assert {AudioChunk.__name__, SpeechResult.__name__, Trajectory.__name__} == "
               "{'AudioChunk', 'SpeechResult', 'Trajectory'}\n")
    assert done.returncode == 0, done.stderr[-3000:]
    imported = [line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    first_torch = next(i for i, name in enumerate(imported) if name == "torch")
    assert imported.index("v2") < first_torch  # torch came with the names, not with `import v2`
    assert sorted(v2.__all__) == ["AudioChunk", "OverloadedError", "RequestError", "Runtime", "SpeechParams",
                                  "SpeechRequest", "SpeechResult", "Trajectory"]


def test_listing_cards_and_help_load_no_torch():
    done = run("import sys\n"
               "from v2.cli import main\n"
               "assert main(['cards']) == 0\n"
               "try:\n    main(['synth', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
               "assert 'torch' not in sys.modules, 'the command line loaded torch'\n")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "moss_tts_local_tiny" in done.stdout and "--repetition-penalty" in done.stdout
