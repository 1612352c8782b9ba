"""What `python -m v2.bench.engine` (engine.py) shows of its report: the small table (`table`) and the picture
of the overhead sweep (`plot`, `--plot FILE.png`: microseconds per row and per step against rows, the goal
drawn).
Must not know: how the figures are measured, the runtime, any family.
"""

from __future__ import annotations

from typing import Any

from v2.bench.engine_instant import OVERHEAD_GOAL_US_PER_ROW


def table(report: dict[str, Any]) -> str:
    lines = ["engine overhead (instant experts, CPU stream)",
             f"{'rows':>5} {'wall us/step':>12} {'wall us/row':>11} {'eng us/step':>11} {'eng us/row':>10}  (best; median)"]
    for r in report["overhead"]["rows"]:
        b, m = r["best"], r["median"]
        lines.append(f"{r['rows']:>5} {b['us_per_step']:>12.0f} {b['us_per_row']:>11.1f} {b['engine_us_per_step']:>11.0f} "
                     f"{b['engine_us_per_row']:>10.1f}  ({m['us_per_step']:.0f}, {m['us_per_row']:.1f}, "
                     f"{m['engine_us_per_step']:.0f}, {m['engine_us_per_row']:.1f})")
    g = report["overhead"]["goal"]
    lines.append(f"goal: engine <= {g['engine_us_per_row_at_64_rows_max']:.0f} us/row at 64 rows: "
                 f"{g['value']:.1f} -> {'met' if g['met'] else 'NOT met'}")
    s = report["simulated_device"]
    lines.append(f"simulated device D = {s['D_ms']:.2f} ms, 64 rows: step period {s['period_ms']:.3f} ms "
                 f"(goal <= {s['goal']['period_ms_max']:.2f}: {'met' if s['goal']['met'] else 'NOT met'}); "
                 f"engine {s['engine_us_per_step']:.0f} us/step; without overlap ~{s['no_overlap_estimate_ms']:.3f} ms")
    lines.append(f"{'stream':>9} {'audio':>5} {'runtime ms/frame':>16} {'generate_batch':>14} {'overhead':>8} {'codes equal':>11}")
    for r in report["serving_vs_generate_batch"]:
        goal = r.get("goal")
        mark = "" if goal is None else ("  goal met" if goal["met"] else "  goal NOT met")
        lines.append(f"{r['stream']:>9} {str(r['decode_audio']):>5} {r['runtime_ms_per_frame']:>16.2f} "
                     f"{r['generate_batch_ms_per_frame']:>14.2f} {r['overhead_fraction'] * 100:>7.1f}% "
                     f"{str(r['codes_equal']):>11}{mark}")
    for r in report["time_to_first_audio"]:
        lines.append(f"time to first audio, {r['stream']}: {r['ttfa_ms_p50']:.1f} ms, {r['ttfa_steps_p50']:.0f} steps (p50)")
    two = report.get("two_paged_loops")
    if two:
        lines.append(f"two paged loops ({two['card']}: {' -> '.join(two['paged_loops'])}; instant experts, CPU stream)")
        for r in two["rows"]:
            b = r["best"]
            lines.append(f"{r['rows']:>5} requests: {b['rows_per_step']:.1f} rows/step, engine {b['engine_us_per_step']:.0f} "
                         f"us/step, {b['engine_us_per_row']:.1f} us/row (median {r['median_engine_us_per_row']:.1f})")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> None:
    """Part "overhead": engine and wall microseconds per row and per step against rows (best of the runs)."""
    from v2.bench.plot import Panel, Series, sweep

    over = report["overhead"]["rows"]
    rows = [r["rows"] for r in over]
    per_row = Panel("per row", "microseconds", [Series("engine thread", [r["best"]["engine_us_per_row"] for r in over]),
                                                Series("wall", [r["best"]["us_per_row"] for r in over])],
                    {f"goal at 64 rows ({OVERHEAD_GOAL_US_PER_ROW:g} us)": OVERHEAD_GOAL_US_PER_ROW})
    per_step = Panel("per step", "microseconds", [Series("engine thread", [r["best"]["engine_us_per_step"] for r in over]),
                                                  Series("wall", [r["best"]["us_per_step"] for r in over])])
    sweep(path, f"engine overhead, {report['card']} (instant experts, CPU stream; best of {report['repeat']})",
          "rows per step (one-row requests)", rows, [per_row, per_step])

