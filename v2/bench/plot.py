"""Pictures of a benchmark's sweep (`--plot FILE.png` on `python -m v2.bench`, `v2.bench.http`, `v2.bench.engine`):
side-by-side panels, each one or more measured series against the swept parameter, with reference lines
(a baseline, a goal) drawn flat across.

Owns: checking, before a benchmark runs, that matplotlib is installed (the `plot` extra) and the file can be
written; drawing the panels off-screen (the Agg backend: no display needed) and saving the file.
Must not know: what any benchmark measures (each builds its own `Panel`s from its report), the runtime.
matplotlib is imported only here, and only when a plot is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from v2.audiofile import OutputError, check_writable

FORMATS = (".png", ".svg", ".pdf")


class PlotError(Exception):
    """A plot cannot be made (matplotlib missing, a path that cannot be written); the message says why."""


@dataclass(frozen=True)
class Series:
    label: str
    y: Sequence[float]
    dashed: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    y_label: str
    series: Sequence[Series]
    lines: dict[str, float] = field(default_factory=dict)  # label -> a flat reference line (baseline, goal)


def check(path: str | Path) -> Path:
    """The path to draw to, refused now (before the benchmark runs) when matplotlib is missing, the suffix is
    not an image format, or the file cannot be written."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise PlotError(f"--plot {path}: give a {', '.join(FORMATS)} file")
    _pyplot()
    try:
        return check_writable(path, "--plot")
    except OutputError as e:
        raise PlotError(str(e)) from None


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotError("--plot needs matplotlib: pip install -e \".[plot]\" (or pip install matplotlib)") from None
    matplotlib.use("Agg")  # off-screen: no display, the same picture everywhere
    import matplotlib.pyplot as plt

    return plt


def sweep(path: str | Path, title: str, x_label: str, x: Sequence[float], panels: Sequence[Panel], *,
          log_x: bool = True, note: str | None = None) -> Path:
    """Draw `panels` side by side, each against `x` (a log-2 axis when `log_x`: concurrency, batch rows)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, panel in zip(axes[0], panels):
        for i, s in enumerate(panel.series):
            ax.plot(x, s.y, marker="o", linestyle="--" if s.dashed else "-", label=s.label,
                    color=colors[(i // 2 if any(t.dashed for t in panel.series) else i) % len(colors)])
        for j, (label, value) in enumerate(panel.lines.items()):
            ax.axhline(value, color="0.35", linestyle=(":", "-.")[j % 2], linewidth=1.2, label=label)
        if log_x:
            ax.set_xscale("log", base=2)
        ax.set_xticks(list(x), [f"{v:g}" for v in x])
        ax.minorticks_off()
        ax.set_xlabel(x_label)
        ax.set_ylabel(panel.y_label)
        ax.set_title(panel.title)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    if note:
        fig.text(0.5, 0.01, note, ha="center", fontsize=8, color="0.3")
    fig.tight_layout(rect=(0, 0.04 if note else 0, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
