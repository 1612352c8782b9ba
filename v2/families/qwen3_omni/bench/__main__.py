"""`python -m v2.families.qwen3_omni.bench ttfa|reference [options]`: the family's benches by name (ttfa.py:
time to first audio against the thinker's end; reference.py: against transformers' generate).
Must not know: what the benches measure."""

from __future__ import annotations

import sys

USAGE = "usage: python -m v2.families.qwen3_omni.bench {ttfa,reference} [options] (--help after the name)"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("ttfa", "reference"):
        print(USAGE, file=sys.stderr)
        return 2
    if args[0] == "ttfa":
        from v2.families.qwen3_omni.bench import ttfa

        return ttfa.main(args[1:])
    from v2.families.qwen3_omni.bench import reference

    return reference.main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
