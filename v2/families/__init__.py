"""Model families: one package per family, each holding everything model-specific (its card section, loops
and the edges between them, executors, prompt layouts, result assembly, RL recompute, weight names) and the
binding of them for the runtime (`<family>/family.py`: `FAMILY`). The registry (v2/registry.py) finds
every package here, and any family installed under the entry-point group `v2.families`, by its folder's
name; nothing outside a family's package names it. The runtime never imports a family (it is handed one: `v2/runtime/family.py`).
What families share (the AR sequence, the executors' plumbing, the paged-family base) is the family kit, `v2/kit/`;
every package here is a family, so the kit is not one of them.
"""
