"""A stand-in for loading a model, for CLI tests of what must be decided before one loads."""

from __future__ import annotations

import pytest

from v2.runtime.runtime import Runtime


class ModelLoaded(Exception):
    """Raised where a model would load."""


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise ModelLoaded("a model was loaded")

    monkeypatch.setattr(Runtime, "from_card", refuse)
