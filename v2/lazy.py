"""Public names that load their module on first use, so importing a package stays cheap (no torch).

Owns: `lazy_names(package, where)`: the `__getattr__` and `__dir__` a package's `__init__` assigns, given
where each public name lives.
Must not know: any package's names.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable


def lazy_names(package: str, where: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`where`: public name -> module. Returns (`__getattr__`, `__dir__`) for the package `package`; a name is
    looked up once, then kept in the package's namespace."""
    module = import_module(package)

    def getattr_(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(where[name]), name)
        setattr(module, name, value)  # later look-ups skip this function
        return value

    def dir_() -> list[str]:
        return sorted([*vars(module), *where])

    return getattr_, dir_
