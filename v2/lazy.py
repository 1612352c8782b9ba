"""Public names that load their module on first use, so importing a package stays cheap (no torch).

Owns: `lazy_names(package, where)`: the `__getattr__` and `__dir__` a package's `__init__` assigns, given
where each public name lives (a module's name, or a function that says it when the name is first used).
Must not know: any package's names.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable, Mapping, Union

Where = Union[str, Callable[[], str]]  # a module's name, or what gives it on first use


def lazy_names(package: str, where: Mapping[str, Where]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`where`: public name -> module (or a function returning it). Returns (`__getattr__`, `__dir__`) for the
    package `package`; a name is looked up once, then kept in the package's namespace."""
    module = import_module(package)

    def getattr_(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        found = where[name]
        value = getattr(import_module(found if isinstance(found, str) else found()), name)
        setattr(module, name, value)  # later look-ups skip this function
        return value

    def dir_() -> list[str]:
        return sorted([*vars(module), *where])

    return getattr_, dir_
