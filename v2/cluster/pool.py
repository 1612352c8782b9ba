"""`RolloutPool`: rollouts on N runtime replicas (Ray actors), with the single runtime's API and results.

Owns: starting the replicas (one actor each, on its own GPU, or CPU actors), turning a rollout into prompt
groups (a prompt's n samples stay together on one replica, so its prefill is shared; each group is seeded
by its index in the whole rollout, exactly as `Runtime.rollout` seeds it, so each trajectory equals a single
runtime's), weight updates (one put into the object store, applied by every replica, versions strictly
increasing), the pool's stats, closing it, and the card's decode-loop limits it is sized by (`decode_limits`,
the Serve deployment's too).
Placement, collection and recovery run on the dispatcher (dispatch.py).
Must not know: the runtime's internals (replicas use its public API only), placement policy details.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import ray
import torch

from v2.card import DEFAULT_CARD, CardError, LoopTable, ModelCard, load_card
from v2.cluster.batch import PoolBatch
from v2.cluster.dispatch import Dispatcher, GroupTask
from v2.cluster.replica import remote_class
from v2.cluster.weights import WeightUpdate, pack
from v2.runtime.weight_updates import WeightUpdateError

_TOTALS = ("groups", "trajectories", "frames", "resubmitted", "losses")
_RUNTIME_TOTALS = ("steps", "running", "waiting", "shared_prefills", "prefilled_rows")


@runtime_checkable
class DecodeLimits(Protocol):
    """The settings of a card's decode loop that the pool and the Serve deployment are sized by."""

    max_running: int
    max_waiting: int
    max_frames: int


def decode_limits(card: ModelCard) -> DecodeLimits:
    """The first loop the card's graph drives that carries the decode limits (its AR loop, whatever the
    family names it; a family's card class declares its `loops`, the common part does not)."""
    loops = getattr(card, "loops", None)
    if isinstance(loops, LoopTable):
        for _, decl in loops.driven():
            if isinstance(decl, DecodeLimits):
                return decl
    raise CardError(f"card {card.name}: loops: no driven loop has max_running, max_waiting and max_frames "
                    "(the pool is sized by them)")


def default_resources() -> dict[str, Any]:
    """One GPU per replica when the cluster has GPUs, else one CPU."""
    return {"num_gpus": 1} if ray.cluster_resources().get("GPU", 0) > 0 else {"num_cpus": 1}


class RolloutPool:
    def __init__(self, card: ModelCard, actors: list[Any], dispatcher: Dispatcher) -> None:
        self.card, self.actors, self._dispatcher = card, actors, dispatcher

    @classmethod
    def from_card(cls, card: str | ModelCard = DEFAULT_CARD, replicas: int = 2, *, checkpoint: str | None = None,
                  codec_checkpoint: str | None = None, device: str | None = None,
                  resources_per_replica: dict[str, Any] | None = None, max_restarts: int = 3,
                  capacity: int | None = None, start_timeout: float | None = 600) -> "RolloutPool":
        """Start `replicas` actors, each loading the card into its own `Runtime`, and wait until all are up.

        `resources_per_replica`: Ray actor resources (default: `{"num_gpus": 1}` on a cluster with GPUs,
        else `{"num_cpus": 1}`; a CPU replica uses as many intra-op threads as the CPUs it asks for, at
        least one). `max_restarts`: how often Ray restarts a dead replica (and the pool reloads its weights).
        `capacity`: trajectories a replica may have in flight before groups wait at the pool (default
        twice the card's `max_running`: a full batch running and the next one queued).
        """
        if replicas < 1:
            raise ValueError(f"replicas: must be >= 1, got {replicas}")
        if not ray.is_initialized():
            ray.init(include_dashboard=False)
        card = card if isinstance(card, ModelCard) else load_card(card)
        resources = dict(resources_per_replica or default_resources())
        threads = None if resources.get("num_gpus") else max(1, int(resources.get("num_cpus", 1)))
        options = {"checkpoint": checkpoint, "codec_checkpoint": codec_checkpoint, "device": device}
        actor_class = remote_class(resources, max_restarts)
        actors = [actor_class.remote(i, card, options, threads) for i in range(replicas)]
        dispatcher = Dispatcher(actors, capacity=capacity or 2 * decode_limits(card).max_running,
                                max_restarts=max_restarts)
        pool = cls(card, actors, dispatcher)
        try:
            dispatcher.wait_ready(start_timeout)
        except BaseException:
            pool.close()
            raise
        return pool

    def rollout(self, prompts: list[Any], *, n: int = 1, seed: int = 0, max_frames: int | None = None,
                first_prompt_index: int = 0, **options: Any) -> PoolBatch:
        """n samples per prompt, as `Runtime.rollout` (the same seeds, group ids and options): a
        `PoolBatch` to iterate as groups finish, or `.trajectories()` in prompt-major, sample-minor order.
        Each group runs on the replica with the least outstanding work when it is placed."""
        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)):
            raise TypeError(f"prompts: expected a list of prompts, got {type(prompts).__name__} "
                            "(wrap a single text in a list: [text])")
        limits = decode_limits(self.card)
        if n < 1 or n > limits.max_running:
            raise ValueError(f"n: must be between 1 and the card's max_running {limits.max_running}, got {n}")
        if max_frames is not None:
            options["max_frames"] = max_frames
        budget = n * (max_frames or limits.max_frames)
        batch = PoolBatch(len(prompts), n, self._dispatcher.cancel)
        self._dispatcher.submit([GroupTask(batch, i, first_prompt_index + i, prompt, n, seed, budget, options)
                                 for i, prompt in enumerate(prompts)])
        return batch

    @property
    def weight_version(self) -> int:
        return self._dispatcher.log.version

    def update_weights(self, named_tensors: dict[str, torch.Tensor] | ray.ObjectRef, version: int, *,
                       mode: str = "wait", timeout: float | None = None) -> None:
        """Put the tensors into the object store once (or take a reference already there) and apply them on
        every replica (`mode` and `timeout` as `Runtime.update_weights`). Returns once every live replica
        holds `version`; a replica that is restarting replays it before it gets any group."""
        self._check(version, mode)
        if isinstance(named_tensors, ray.ObjectRef):
            update = WeightUpdate(version, tensors=named_tensors)
        else:
            if not isinstance(named_tensors, dict):
                raise WeightUpdateError(f"named_tensors: expected a dict of name -> tensor or an object ref, "
                                        f"got {type(named_tensors).__name__}")
            update = WeightUpdate(version, tensors=ray.put(pack(named_tensors)),
                                  names=frozenset(map(str, named_tensors)))
        self._dispatcher.update(update, mode, timeout)

    def update_weights_from_disk(self, path: str | Path, version: int, *, full: bool = True, mode: str = "wait",
                                 timeout: float | None = None) -> None:
        """Every replica reads the checkpoint directory (it must be reachable from each). `full`: it holds
        every weight updated so far, so a restarted replica loads it alone; with False, a restart replays
        the earlier updates too."""
        self._check(version, mode)
        self._dispatcher.update(WeightUpdate(version, path=str(path), full=full), mode, timeout)

    def _check(self, version: object, mode: str) -> None:
        if mode not in ("wait", "abort"):
            raise ValueError(f"mode: must be 'wait' or 'abort', got {mode!r}")
        if isinstance(version, bool) or not isinstance(version, numbers.Integral):
            raise WeightUpdateError(f"version: expected an int, got {type(version).__name__}")
        if version <= self.weight_version:
            raise WeightUpdateError(f"version: must be greater than the current version {self.weight_version}, "
                                    f"got {version}")

    def stats(self, timeout: float = 10.0) -> dict[str, Any]:
        """Per replica (its state, version, work in flight and done, and its runtime's stats when it
        answers within `timeout`) and in total."""
        d = self._dispatcher
        with d.cond:
            rows: list[dict[str, Any]] = [
                {"index": r.index, "state": r.state, "weight_version": r.version, "losses": r.losses,
                 "last_error": r.error, "in_flight": {"groups": len(r.inflight), "trajectories": r.load.samples,
                                                      "frame_budget": r.load.frames}, **r.counters}
                for r in d.replicas]
            pending = len(d.pending)
        calls = [(row, actor.stats.remote()) for row, actor in zip(rows, self.actors) if row["state"] == "ready"]
        for row, ref in calls:
            try:
                row["runtime"] = ray.get(ref, timeout=timeout)
            except Exception as e:  # noqa: BLE001 (a replica lost just now; its state says so next time)
                row["runtime"] = None
                row["stats_error"] = f"{type(e).__name__}: {e}"
        total: dict[str, Any] = {k: sum(row[k] for row in rows) for k in _TOTALS}
        total["in_flight_trajectories"] = sum(row["in_flight"]["trajectories"] for row in rows)
        total["ready"] = sum(row["state"] == "ready" for row in rows)
        runtimes = [row["runtime"] for row in rows if row.get("runtime")]
        total["runtime"] = {k: sum(s[k] for s in runtimes) for k in _RUNTIME_TOTALS}
        return {"weight_version": self.weight_version, "pending_groups": pending, "replicas": rows, "total": total}

    def close(self) -> None:
        """Fail whatever is still running, close every runtime and end the actors."""
        self._dispatcher.close()
        closing = [actor.close.remote() for actor in self.actors]
        ray.wait(closing, num_returns=len(closing), timeout=10)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)

    def __enter__(self) -> "RolloutPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
