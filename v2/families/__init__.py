"""Model families: one package per family, each holding everything model-specific (its card section, loops
and the edges between them, executors, prompt layouts, result assembly, RL recompute, weight names) and the
binding of them for the runtime (`<family>/family.py`: `FAMILY`). The shipped families are listed in
`v2.card.FAMILIES`; the runtime never imports a family (it is handed one: `v2/runtime/family.py`).
"""
