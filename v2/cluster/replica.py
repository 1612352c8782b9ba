"""One rollout replica: a Ray actor process holding one `Runtime`, driven by the pool.

Owns: loading the runtime in the actor (on the GPU Ray gave it, or on the CPU with a bounded number of
intra-op threads), running one prompt group per call (`rt.rollout([prompt], n, seed, first_prompt_index=g)`:
one shared prefill, and the seeds and group id the whole rollout on a single runtime gives that prompt),
refusing a group sent for a weight version it does not hold (a replica Ray restarted behind the pool's
back), replaying weight updates in order, and its stats.
Must not know: placement, other replicas, resubmission (the pool's dispatcher owns those).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import ray
import torch

from v2.cluster.weights import unpack
from v2.rl.trajectory import Trajectory
from v2.runtime import Runtime


class StaleReplicaError(RuntimeError):
    """The replica does not hold the weight version the group was sent for (it was restarted)."""


class RolloutReplica:
    """The actor's class (made remote by the pool with its resources and restart policy)."""

    def __init__(self, index: int, card: Any, options: dict[str, Any], cpu_threads: int | None) -> None:
        if cpu_threads is not None:
            torch.set_num_threads(cpu_threads)
        self.index = index
        self.runtime = Runtime.from_card(card, **options)
        self.incarnation = os.getpid()

    async def info(self) -> dict[str, Any]:
        return {"index": self.index, "pid": self.incarnation, "weight_version": self.runtime.weight_version,
                "device": str(self.runtime.model.device)}

    async def rollout_group(self, prompt: Any, group_id: int, n: int, seed: int, version: int,
                            options: dict[str, Any]) -> list[Trajectory]:
        """The n trajectories of one prompt, sample-minor; `version`: the weights the pool expects here."""
        if self.runtime.weight_version != version:
            raise StaleReplicaError(f"replica {self.index} holds weight version {self.runtime.weight_version}, "
                                    f"the group was sent for {version}")
        batch = self.runtime.rollout([prompt], n=n, seed=seed, first_prompt_index=group_id, **options)
        loop = asyncio.get_running_loop()
        done = [loop.create_future() for _ in batch.handles]
        for handle, future in zip(batch.handles, done):
            handle.on_done(lambda result, f=future: loop.call_soon_threadsafe(_settle, f, result))
        try:
            results = await asyncio.gather(*done)
        except asyncio.CancelledError:  # the pool cancelled the rollout: free the runtime's slots at once
            batch.cancel()
            raise
        return [r.trajectory for r in results]

    async def apply(self, updates: list[tuple[int, Any, str | None]], mode: str,
                    timeout: float | None) -> tuple[int, list[frozenset[str] | None]]:
        """Apply (version, tensors reference, path) updates in order, skipping those at or below the version
        held; returns the version now and, per update, the names its tensors set (None for a checkpoint)."""
        names: list[frozenset[str] | None] = []
        for version, ref, path in updates:
            if ref is not None:
                tensors = unpack(await ref)  # read in place from the object store
                names.append(frozenset(tensors))
                if version > self.runtime.weight_version:
                    await asyncio.to_thread(self.runtime.update_weights, tensors, version, mode=mode, timeout=timeout)
            else:
                names.append(None)
                if version > self.runtime.weight_version:
                    await asyncio.to_thread(self.runtime.update_weights_from_disk, path, version, mode=mode,
                                            timeout=timeout)
        return self.runtime.weight_version, names

    async def stats(self) -> dict[str, Any]:
        return self.runtime.stats()

    async def close(self) -> None:
        await asyncio.to_thread(self.runtime.close)


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def remote_class(resources: dict[str, Any], max_restarts: int) -> Any:
    """The actor class with its resources; an async actor, so one replica runs many groups at once."""
    return ray.remote(RolloutReplica).options(max_restarts=max_restarts, max_task_retries=0, max_concurrency=1000,
                                              **resources)
