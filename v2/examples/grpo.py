"""`python -m v2.examples.grpo`: a small GRPO-style loop on the default (tiny) card, on CPU, in well under a minute.

Owns: the example only. Each iteration: roll out n samples per prompt on the runtime (the ROLLOUT
profile, exact per-codebook logprobs, one shared prefill per prompt), score each sample by how close
its length is to a target duration, normalise rewards within each group (the advantages), recompute the
same logprobs differentiably on a trainer copy of the model, take a policy-gradient step on the parameters
named by `--train` (default: the default card's local transformer and stop head), and push the new weights
into the runtime with a version number. `--card` runs it on another card (with its own `--train` names).
`--replicas N` rolls out on a pool of N runtime replicas on Ray instead (v2.cluster; the same trajectories).
Must not know: engine internals.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from v2.card import DEFAULT_CARD, build_model, load_card
from v2.rl import logprobs
from v2.rl.trajectory import Trajectory
from v2.runtime import Runtime

PROMPTS = ["A short sentence to speak.", "Another prompt, a little longer than the first one."]
TRAINABLE = ("local_transformer.", "local_text_lm_head.")  # parameter-name prefixes trained on the default card


def reward(t: Trajectory, target_frames: int) -> float:
    """Closeness of the utterance's length to the target: 0 at the target, -1 at twice or none of it."""
    return -abs(len(t.codes) - target_frames) / target_frames


def advantages(trajectories: list[Trajectory], target_frames: int) -> list[float]:
    """Rewards normalised within each group (same prompt): (r - mean) / (std + 1e-6)."""
    out = []
    for t in trajectories:
        group = [reward(u, target_frames) for u in trajectories if u.group_id == t.group_id]
        mean = sum(group) / len(group)
        std = (sum((r - mean) ** 2 for r in group) / len(group)) ** 0.5
        out.append((reward(t, target_frames) - mean) / (std + 1e-6))
    return out


def rollout_engine(card: Any, replicas: int) -> Any:
    """One runtime in this process, or (replicas > 0) a pool of runtimes on Ray, one CPU each here."""
    if not replicas:
        return Runtime.from_card(card, device="cpu")
    from v2.cluster import RolloutPool  # the ray extra, imported only when asked for

    return RolloutPool.from_card(card, replicas=replicas, device="cpu", resources_per_replica={"num_cpus": 1})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m v2.examples.grpo", description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--n", type=int, default=4, help="samples per prompt")
    p.add_argument("--target-frames", type=int, default=12)
    p.add_argument("--max-frames", type=int, default=40)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--replicas", type=int, default=0, help="roll out on a Ray pool of this many runtimes (0: one "
                                                            "runtime in this process)")
    p.add_argument("--card", default=DEFAULT_CARD, help="a card with seeded or local weights (default: %(default)s)")
    p.add_argument("--train", nargs="+", default=list(TRAINABLE), metavar="PREFIX",
                   help="train the parameters whose names start with these (default: %(default)s)")
    args = p.parse_args(argv)
    card = load_card(args.card)
    policy = build_model(card)  # the trainer's copy: the same seeded weights as the runtime's
    params = {n: q for n, q in policy.named_parameters() if n.startswith(tuple(args.train))}
    if not params:
        p.error(f"--train: no parameter of {card.name}'s model starts with {' or '.join(args.train)}")
    for q in params.values():
        q.requires_grad_(True)
    optimizer = torch.optim.Adam(params.values(), lr=args.lr)
    with rollout_engine(card, args.replicas) as runtime:
        for it in range(args.iterations):
            batch = runtime.rollout(PROMPTS, n=args.n, seed=1000 * it, max_frames=args.max_frames, temperature=1.0)
            trajectories = batch.trajectories(timeout=120)
            adv = advantages(trajectories, args.target_frames)
            loss = torch.zeros(())
            drift = 0.0
            for t, a in zip(trajectories, adv):
                lp = logprobs(policy, t)  # recomputed by the trajectory's family, differentiably
                f = len(t.codes)
                if f:
                    drift = max(drift, float((lp[:f].detach() - torch.from_numpy(t.logprobs)).abs().max()))
                loss = loss - a * lp.sum() / len(trajectories)  # on-policy: the importance ratio is 1
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            runtime.update_weights({n: q.detach() for n, q in params.items()}, version=it + 1)
            rewards = [reward(t, args.target_frames) for t in trajectories]
            print(json.dumps({"iteration": it, "weight_version": trajectories[0].weight_version,
                              "mean_reward": sum(rewards) / len(rewards),
                              "mean_frames": sum(len(t.codes) for t in trajectories) / len(trajectories),
                              "loss": float(loss.detach()), "max_rollout_vs_recompute": drift,
                              "runtime_version_now": runtime.weight_version}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
