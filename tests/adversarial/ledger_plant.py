#!/usr/bin/env python3
"""Adversarial ledger. Class: forging who vouches for a bundle.

Cheat: after forging a bundle (bundle_rehash.py), add to the ledger kwb consults (the one of the task the bundle's
plan names, which a forged bundle can bring along) a validate row holding the forged bundle's manifest digest, plan
digest and decision, unsealed or sealed by a key of the forger's own.
Defense: a ledger row vouches for a bundle only with a seal a trusted key made (ledger/bundle_entry.h).
Expected: verify says self-consistent only; keep exits 77.

Usage: ledger_plant.py LEDGER BUNDLE
"""
import hashlib
import json
import sqlite3
import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 64
    ledger, bundle = Path(sys.argv[1]), Path(sys.argv[2])
    manifest = hashlib.sha256((bundle / "MANIFEST.sha256").read_bytes()).hexdigest()
    plan = hashlib.sha256((bundle / "plan.json").read_bytes()).hexdigest()
    decision = json.loads((bundle / "decision.json").read_text())["decision"]
    db = sqlite3.connect(ledger)
    for seal in ("", "ab" * 32 + ":" + "cd" * 64):  # none, and a signature by a key no one trusts
        db.execute(
            "INSERT INTO runs (kind, task, task_dir, backend, started, finished, outcome, reasons, timing_holds, "
            "plan_digest, bundle, kwb_version, pid, manifest_sha256, seal) "
            "VALUES ('validate', 'rmsnorm', '/t', 'cpu', '2026-01-01T00:00:00Z', '2026-01-01T00:00:01Z', ?, '[]', "
            "'[]', ?, ?, 'forged', 1, ?, ?)",
            (decision, plan, str(bundle), manifest, seal))
    db.commit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
