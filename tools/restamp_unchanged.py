"""Re-stamp measured tuning entries whose kernel family changed without changing their code.

A measured entry records its kernel family's ``source_hash``; any edit of the family's
sources stales it, and a stale entry serves nothing. Some edits add a path that the entry's
build never compiles (a new dtype's ``#if`` branch): the entry's own code is unchanged and its
measurement still holds. This tool gives such entries the current hash and appends why to
their provenance. It never decides that an edit left the code unchanged: the caller shows it
(the preprocessed source or the disassembly of each entry's build, before and after) and says
how in ``--reason``.

    python tools/restamp_unchanged.py hal/tuning/tables/cpu.json --kernel pool2d \\
        --reason "2026-12-07: the bfloat16 prelude branch; float32/float16 disassembly identical"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hal.resources import family_hash
from hal.tuning.table import KERNEL_FOLDERS


def main(argv: list[str] | None = None) -> int:
    """Re-stamp the stale measured entries of one table (optionally one kernel family)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", type=Path)
    parser.add_argument("--kernel", action="append", help="only this kernel family (repeatable; default all)")
    parser.add_argument("--reason", required=True, help="how the unchanged code was shown (goes into provenance)")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    doc = json.loads(args.table.read_text())
    folder = KERNEL_FOLDERS[doc["backend"]]
    changed = 0
    for i, entry in enumerate(doc["entries"]):
        kernel = entry.get("kernel")
        if "source_hash" not in entry or (args.kernel and kernel not in args.kernel):
            continue
        current = family_hash(folder, kernel)
        if entry["source_hash"] == current:
            continue
        print(f"entry {i}: {entry['level']} {entry['match']} {kernel} {entry.get('key')}: "
              f"{entry['source_hash'][:12]} -> {current[:12]}")
        entry["source_hash"] = current
        entry["provenance"] = f"{entry['provenance']}; source_hash re-stamped: {args.reason}"
        changed += 1
    if changed and not args.dry_run:
        args.table.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{changed} entries re-stamped{' (dry run)' if args.dry_run else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
