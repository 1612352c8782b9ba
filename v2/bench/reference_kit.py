"""What every family's comparison with its reference implementation shares (the families' bench `reference`
modules and their `reference_setup` modules use it).

Owns: the skip checks (`import_missing`: whether the reference's python imports what the worker needs;
`not_a_checkpoint`: a config.json with the right `model_type`), the child process that runs the reference
(`WorkerProcess`: a prompts file, one JSON line when ready, then one JSON line per request; `run` and
`ops_per_frame`), aten operations per frame step (`ops_per_frame`, counted as `v2.bench.launches` counts
them), the interleaved repetitions (`time_sides`: warm-up, the order rotating each repetition, the paired
timings), the report (`report`: medians, the paired ratios, the codes that must be equal, the goals),
`assert_equal` and the family command (`main`: the skip line or the table and the JSON line).
Must not know: any family, model or engine internals (the sides, prompts and checks are the family's).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from v2.bench.launches import NO_LAUNCH, LaunchCounter

COUNT_FRAMES = (2, 4)  # ops per frame step = the difference of two runs' counts / 2 (the prefill cancels)
WORKER_FLAGS = ["--no-launch", json.dumps(sorted(NO_LAUNCH)), "--count-frames", json.dumps(list(COUNT_FRAMES))]


def import_missing(python: str, probe: str, advice: Callable[[str], str]) -> str:
    """Why `python` cannot run `probe` ("" when it can; `advice(last stderr line)` when it fails)."""
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300)
    except OSError as e:
        return f"{python}: {e.strerror}"
    if done.returncode != 0:
        return advice((done.stderr.strip().splitlines() or ["failed"])[-1])
    return ""


def not_a_checkpoint(path: Path, model_type: str, expected: str) -> str:
    """Why `path` has no config.json of `model_type` ("" when it has; `expected` says what belongs there)."""
    config = path / "config.json"
    if not config.is_file():
        return f"{path} has no config.json ({expected})"
    if json.loads(config.read_text()).get("model_type") != model_type:
        return f"{config}: model_type is not '{model_type}'"
    return ""


class WorkerProcess:
    """The reference in a child process: `run(batch, frames, seed, greedy)` -> (wall s, codes)."""

    def __init__(self, prefix: str, prompts: Any, command: Callable[[Path], list[str]]) -> None:
        """`command(prompts file)`: the worker's command line; `prompts` is written there as JSON."""
        self._dir = tempfile.TemporaryDirectory(prefix=prefix)
        file = Path(self._dir.name) / "prompts.json"
        file.write_text(json.dumps(prompts))
        self._err = open(Path(self._dir.name) / "stderr.txt", "w+")
        self.proc = subprocess.Popen(command(file), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     text=True)
        self.ready = self._reply()

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self._err.seek(0)
                tail = self._err.read()[-1500:]
                raise RuntimeError(f"the reference worker exited ({self.proc.wait()}): {tail}")
            if line.startswith("{"):
                return json.loads(line)  # type: ignore[no-any-return]

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def run(self, batch: int, frames: int, seed: int, greedy: bool) -> tuple[float, list[np.ndarray]]:
        reply = self._ask({"batch": batch, "frames": frames, "seed": seed, "greedy": greedy})
        if reply["frames"] != [frames] * batch:
            raise RuntimeError(f"the reference made {reply['frames']} frames, asked {frames} for each of {batch}")
        return float(reply["wall_s"]), [np.asarray(c, dtype=np.int64) for c in reply["codes"]]

    def ops_per_frame(self, batch: int, greedy: bool) -> float:
        """The reference's aten operations per frame step (counted as `ops_per_frame` counts v2's)."""
        return float(self._ask({"count": True, "batch": batch, "greedy": greedy})["ops_per_frame"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._err.close()
        self._dir.cleanup()


def ops_per_frame(run: Callable[[int], Any]) -> float:
    """aten operations per frame step of `run(frames)` (a loop over `frames` frames), no-grad."""
    counts = []
    with torch.no_grad():
        for frames in COUNT_FRAMES:
            counter = LaunchCounter()
            with counter:
                run(frames)
            counts.append(sum(counter.ops.values()))
    return (counts[1] - counts[0]) / (COUNT_FRAMES[1] - COUNT_FRAMES[0])


def side_rows(name: str) -> int:
    """The rows of a side named `..._N`."""
    return int(name.rsplit("_", 1)[1])


def order(modes: tuple[str, ...], batch: int) -> list[str]:
    """The sides as `mode/side`, per mode: the reference, `generate` and the runtime at batch 1 and N."""
    return [f"{m}/{s}" for m in modes for s in ("reference_1", "generate_1", "runtime_1", f"reference_{batch}",
                                                f"generate_{batch}", f"runtime_{batch}")]


def time_sides(keys: list[str], sides: dict[str, Callable[[str], list[np.ndarray]]], ref: WorkerProcess,
               frames: int, repeat: int, log: Callable[[str], None]
               ) -> tuple[dict[str, list[float]], dict[str, list[np.ndarray]]]:
    """(wall seconds per repetition, the last codes) per `mode/side` key: every side warmed up once (a few
    frames for the reference), then `repeat` interleaved repetitions, the order rotating each one."""
    codes: dict[str, list[np.ndarray]] = {}

    def timed(key: str, seed: int) -> float:
        mode, side = key.split("/")
        if side.startswith("reference_"):
            wall, codes[key] = ref.run(side_rows(side), frames, seed, mode == "greedy")
            return wall
        start = time.perf_counter()
        codes[key] = sides[side](mode)
        wall = time.perf_counter() - start
        if any(c.shape[0] != frames for c in codes[key]):
            raise RuntimeError(f"{key} made {[c.shape[0] for c in codes[key]]} frames, asked {frames}")
        return wall

    for key in keys:  # warm-up: every side once (a few frames for the reference)
        mode, side = key.split("/")
        if side.startswith("reference_"):
            ref.run(side_rows(side), min(frames, 4), 0, mode == "greedy")
        else:
            sides[side](mode)
    walls: dict[str, list[float]] = {k: [] for k in keys}
    for i in range(repeat):
        shift = i % len(keys)
        for key in keys[shift:] + keys[:shift]:
            walls[key].append(timed(key, i))
        log(f"  repetition {i + 1}/{repeat}: " + ", ".join(
            f"{k} {walls[k][-1] / frames / side_rows(k) * 1e3:.2f}" for k in keys) + " ms per row-frame")
    return walls, codes


def report(keys: list[str], walls: dict[str, list[float]], codes: dict[str, list[np.ndarray]], frames: int,
           batch: int, modes: tuple[str, ...], goals: dict[str, float]) -> dict[str, Any]:
    """Per side: ms per row-frame (median, min) and the paired ratios to the reference's run of the same batch
    and mode; the codes that must be equal; each goal (`batch_1`, `batch_n`: x the reference) and whether met."""
    rows = []
    for key in keys:
        mode, side = key.split("/")
        n = side_rows(side)
        row: dict[str, Any] = {"side": key, "rows": n, "frames": frames,
                               "ms_per_row_frame_median": statistics.median(walls[key]) / frames / n * 1e3,
                               "ms_per_row_frame_min": min(walls[key]) / frames / n * 1e3}
        if not side.startswith("reference_"):
            paired = [a / b for a, b in zip(walls[key], walls[f"{mode}/reference_{n}"])]
            row["x_reference_median"] = statistics.median(paired)
            row["x_reference_each"] = paired
        rows.append(row)

    def same(a: str, b: str) -> bool:
        return len(codes[a]) == len(codes[b]) and all(np.array_equal(x, y) for x, y in zip(codes[a], codes[b]))

    equal: dict[str, Any] = {}
    if "greedy" in modes:
        g = "greedy/"
        equal.update({
            "greedy_generate_equals_reference_1": same(g + "generate_1", g + "reference_1"),
            "greedy_generate_batch_equals_reference_batch": same(g + f"generate_{batch}", g + f"reference_{batch}"),
            "greedy_runtime_equals_generate_batch": same(g + f"runtime_{batch}", g + f"generate_{batch}"),
            "greedy_runtime_1_equals_generate_1": same(g + "runtime_1", g + "generate_1"),
            "greedy_batch_row0_equals_alone": bool(np.array_equal(codes[g + f"generate_{batch}"][0],
                                                                  codes[g + "generate_1"][0]))})
    if "sampled" in modes:
        s = "sampled/"
        equal["sampled_runtime_equals_generate_batch"] = same(s + f"runtime_{batch}", s + f"generate_{batch}")
        equal["sampled_batch_row0_equals_alone"] = bool(np.array_equal(codes[s + f"generate_{batch}"][0],
                                                                       codes[s + "generate_1"][0]))
    x = {r["side"]: float(r["x_reference_median"]) for r in rows if "x_reference_median" in r}
    met = {f"{m}/{side}": {"x": x[f"{m}/{side}"], "goal": goals[goal], "met": x[f"{m}/{side}"] <= goals[goal]}
           for m in modes for side, goal in (("generate_1", "batch_1"), ("runtime_1", "batch_1"),
                                             (f"runtime_{batch}", "batch_n"))}
    return {"frames": frames, "batch": batch, "modes": list(modes), "sides": rows, "codes": equal, "goals": met}


def assert_equal(report: dict[str, Any], log: Callable[[str], None]) -> None:
    """Raises AssertionError (after logging the report) when codes that must be equal are not (v2's among
    themselves and against the reference's, and the reference's against its fixture's where checked)."""
    failed = [k for k, v in report["codes"].items() if v is False]
    fixture_ok = report["reference_fixture_codes_equal"]
    if failed or (fixture_ok is not None and not all(fixture_ok.values())):
        log(json.dumps(report))
        raise AssertionError(f"greedy codes differ: {failed or fixture_ok}")


def main(argv: list[str] | None, *, family: str, doc: str, checkpoint: str, python_env: str,
         needs: str, modes: tuple[str, ...], reference_python: Callable[[], str],
         why: Callable[[Path, str], str], compare: Callable[..., dict[str, Any]]) -> int:
    """`python -m v2.families.<family>.bench.reference`: the scenario on `--checkpoint` (default: `checkpoint`);
    the table, then one JSON line (`v2.bench.reference`'s), or the skip (`why(checkpoint, python)`) and its
    reason. `needs`: what the reference's python must have, for the help."""
    import argparse

    from v2.bench.__main__ import machine
    from v2.bench.reference import table

    p = argparse.ArgumentParser(prog=f"python -m v2.families.{family}.bench.reference",
                                description=doc.splitlines()[0])
    p.add_argument("--checkpoint", default=checkpoint,
                   help="the tiny fixture's checkpoint folder (default: %(default)s)")
    p.add_argument("--reference-python", default=None, help=f"python with {needs} (default: ${python_env}, "
                   "else this one)")
    p.add_argument("--frames", type=int, default=64, help="frames each request speaks (default: %(default)s)")
    p.add_argument("--batch", type=int, default=16, help="requests at once in the batched rows (default: %(default)s)")
    p.add_argument("--repeat", type=int, default=5, help="runs per row; the median is reported (default: %(default)s)")
    p.add_argument("--modes", nargs="+", choices=modes, default=list(modes),
                   help="greedy and/or sampled decoding (default: %s)" % " ".join(modes))
    args = p.parse_args(argv)
    python = args.reference_python or reference_python()
    path = Path(args.checkpoint)
    skip = why(path, python)
    line: dict[str, Any] = {"bench": "v2.reference", "family": family}
    if skip:
        print(f"{skip}: skipped", file=sys.stderr)
        print(json.dumps({**line, "skipped": f"{skip}: skipped"}))
        return 0
    result = compare(path, python, frames=args.frames, batch=args.batch, repeat=args.repeat,
                     log=lambda s: print(s, file=sys.stderr), modes=tuple(args.modes))
    print(table(result))
    print(json.dumps({**line, "machine": machine("cpu"), **result}))
    return 0
