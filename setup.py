"""Build configuration that pyproject.toml cannot say: the package list plus `v2.cards`, a package whose files
live in the top-level `cards/` directory, so that the wheel carries the cards as `v2/cards/*.toml` (read with
importlib.resources). Everything else about the project is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

setup(packages=[*find_namespace_packages(include=["v2", "v2.*"], exclude=["*.__pycache__"]), "v2.cards"],
      package_dir={"v2.cards": "cards"})
