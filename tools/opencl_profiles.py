"""Which emulated OpenCL profiles `make test` runs: each once per distinct set of table entries.

Under ``HAL_OPENCL_PROFILE`` the backend differs from PoCL's own only in the tuning entries it
matches (the profile's vendor, architecture family and architecture; the device's limits and
every other decision stay PoCL's, backends/opencl.py). Two profiles that match the same entries
at the same levels serve the same parameters for every call, so running the op tests under both
checks nothing twice. Today the three AMD profiles match only the vendor-level AMD entries.

    python3 tools/opencl_profiles.py PROFILE...

prints the profiles to run, one a line, in the order given; each one skipped goes to stderr
with the profile it duplicates. Shipped and user tables (``HAL_TUNING_PATH``) both count.
"""

from __future__ import annotations

import sys

from hal.backends.opencl import PROFILES
from hal.tuning.table import Entry, shipped_entries, user_entries


def matched_entries(profile: str, entries: list[Entry]) -> frozenset[tuple[object, ...]]:
    """The entries a device emulating `profile` can be served from, with their levels.

    Device-level entries match by device name (PoCL's under every profile) and, when they
    record one, by architecture: those recording the profile's architecture, or none, count."""
    vendor, family, arch = PROFILES[profile]
    wanted = {"vendor": vendor, "arch_family": family, "arch": arch}
    hits = set()
    for e in entries:
        if (e.level == "device" and e.arch in (None, arch)) or wanted.get(e.level) == e.match:
            hits.add((e.level, e.kernel, e.key, e.params))
    return frozenset(hits)


def distinct(profiles: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(the profiles to run, [(skipped, the earlier profile it duplicates)])."""
    entries = [*shipped_entries("opencl"), *user_entries("opencl")]
    seen: dict[frozenset[tuple[object, ...]], str] = {}
    run, skipped = [], []
    for name in profiles:
        if name not in PROFILES:
            raise SystemExit(f"opencl_profiles: {name!r} is not a profile ({', '.join(PROFILES)})")
        signature = matched_entries(name, entries)
        if signature in seen:
            skipped.append((name, seen[signature]))
        else:
            seen[signature] = name
            run.append(name)
    return run, skipped


def main(argv: list[str]) -> int:
    run, skipped = distinct(argv)
    for name, same in skipped:
        print(f"  {name}: the same table entries as {same}; not run again", file=sys.stderr)
    print("\n".join(run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
