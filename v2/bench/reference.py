"""`python -m v2.bench.reference`: a family's frame step against its reference implementation's own generate().

Owns: the command (`--card NAME|PATH` or `--family NAME`, default the default card's family; `--reference
DIR`, `--reference-python`, `--frames`, `--batch`, `--repeat`), `locate` (where the family's reference copy
is: the flag, else the family's environment variable, else the family's `DEFAULT_REFERENCE` where it names one
that exists, e.g. the tiny fixture's checkpoint; the skip and its reason where there is none, it is not a copy,
or the family has no comparison), the table and the JSON line. The scenario itself is the family's (its bench
package's `reference`: `ENV`, `PYTHON_ENV`, optional `DEFAULT_REFERENCE`, `check`, `compare`;
v2/bench/family.py): which checkpoint, which sides, how its reference is run.
Must not know: any family, model or engine internals.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from v2.bench.family import choose, part


def hooks(family: str) -> Any:
    """The family's reference comparison (its bench package's `reference`), or None where it has none."""
    return part(family, "reference")


def locate(family: str, reference: str | None, python: str | None) -> tuple[Path | None, str, str]:
    """(the family's reference copy or None, its python, why it is skipped when None)."""
    found = hooks(family)
    py = python or sys.executable
    if found is None:
        return None, py, f"family {family!r} has no reference comparison: skipped"
    default = getattr(found, "DEFAULT_REFERENCE", None)  # e.g. a fixture's checkpoint shipped with the tests
    ref = reference or os.environ.get(found.ENV) or (str(default) if default is not None and default.exists() else None)
    py = python or os.environ.get(found.PYTHON_ENV) or sys.executable
    if not ref:
        return None, py, f"no reference copy given (--reference DIR or ${found.ENV}): skipped"
    why = found.check(Path(ref))
    return (None, py, f"{why}: skipped") if why else (Path(ref), py, "")


def compare(family: str, reference: Path, python: str, *, frames: int = 64, batch: int = 16, repeat: int = 5,
            log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The family's scenario: per side, ms per row-frame (median) and the median paired ratio to the reference."""
    return hooks(family).compare(reference, python, frames=frames, batch=batch, repeat=repeat,  # type: ignore[no-any-return]
                                 log=log)


def table(report: dict[str, Any]) -> str:
    lines = [f"{'side':>20} {'rows':>4} {'ms/row-frame':>12} {'x reference':>11}"]
    for r in report["sides"]:
        x = f"{r['x_reference_median']:.3f}" if "x_reference_median" in r else "-"
        lines.append(f"{r['side']:>20} {r['rows']:>4} {r['ms_per_row_frame_median']:>12.3f} {x:>11}")
    lines.append(f"codes: {report['codes']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from v2.bench.__main__ import machine

    p = argparse.ArgumentParser(prog="python -m v2.bench.reference", description=__doc__.splitlines()[0])
    p.add_argument("--card", default=None, help="compare this card's family (default: the default card's)")
    p.add_argument("--family", default=None,
                   help="compare this family (a registered family's name; default: the card's)")
    p.add_argument("--reference", default=None,
                   help="a local copy of the family's reference implementation (default: its environment variable)")
    p.add_argument("--reference-python", default=None,
                   help="python with its dependencies (default: the family's environment variable, else this one)")
    p.add_argument("--frames", type=int, default=64, help="frames each request speaks (default: %(default)s)")
    p.add_argument("--batch", type=int, default=16, help="requests at once in the batched rows (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=5, help="runs per row; the median is reported (default: %(default)s)")
    args = p.parse_args(argv)
    family, _ = choose(args.card, args.family, p)
    reference, python, why = locate(family, args.reference, args.reference_python)
    if reference is None:
        print(why, file=sys.stderr)
        print(json.dumps({"bench": "v2.reference", "family": family, "skipped": why}))
        return 0
    report = compare(family, reference, python, frames=args.frames, batch=args.batch, repeat=args.repeat,
                     log=lambda s: print(s, file=sys.stderr))
    print(table(report))
    print(json.dumps({"bench": "v2.reference", "family": family, "machine": machine("cpu"), **report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
