"""v2: a step-scheduled multi-loop runtime for dual-AR text-to-speech.

Owns: the public names (`Runtime`, `SpeechParams`, `SpeechRequest`, `SpeechResult`, `AudioChunk`,
`Trajectory`, `RequestError`, `OverloadedError`) and the version. `SpeechParams` is the request in no
family's terms (what the server takes); `SpeechRequest` keeps its old public name for the default card's
family's typed request (its package's `request.SpeechRequest`, found through the card and the registry on
first use; a runtime's own is what `rt.parse` returns). Each name loads its module on first use, so
`import v2` stays cheap (no torch) for the command line's fast paths (`v2 cards`, `--help`) and for
torch-free parts of the package.
Must not know: anything behind those names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from v2.lazy import Where, lazy_names

__version__ = "0.1.0"


def _default_request() -> str:
    """The module of the default card's family's request (`<its package>.request`)."""
    from v2.card import DEFAULT_CARD, load_card
    from v2.registry import family_package

    return family_package(load_card(DEFAULT_CARD).family) + ".request"


_WHERE: dict[str, Where] = {
    "AudioChunk": "v2.contracts", "OverloadedError": "v2.errors", "RequestError": "v2.errors",
    "Runtime": "v2.runtime.runtime", "SpeechParams": "v2.params", "SpeechRequest": _default_request,
    "SpeechResult": "v2.runtime.handles", "Trajectory": "v2.rl.trajectory"}

__all__ = ["AudioChunk", "OverloadedError", "RequestError", "Runtime", "SpeechParams", "SpeechRequest",
           "SpeechResult", "Trajectory"]

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ loads each on first use
    from v2.contracts import AudioChunk
    from v2.errors import OverloadedError, RequestError
    from v2.params import SpeechParams
    from v2.rl.trajectory import Trajectory
    from v2.runtime.runtime import Runtime
    from v2.runtime.handles import SpeechResult

    SpeechRequest: Any  # the default card's family's request model (a pydantic model class)

__getattr__, __dir__ = lazy_names(__name__, _WHERE)
