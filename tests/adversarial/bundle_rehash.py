#!/usr/bin/env python3
"""Attack (issue 24, class 5): re-hash an evidence bundle after swapping its candidate's source.

Usage: bundle_rehash.py BUNDLE NEW_SOURCE

Edits BUNDLE in place as someone with write access to it would, to make NEW_SOURCE (say, a slower kernel) the
candidate that `kwb keep` promotes:
  - the candidate's source copy (artifacts/<sha256>.cpp) is replaced by NEW_SOURCE under its own hash, and every
    mention of the old hash in the bundle's JSON files is rewritten to the new one;
  - the candidate's "source" in plan.json (the file keep makes the incumbent) names NEW_SOURCE;
  - the plan digest is recomputed and rewritten wherever the old one appears (decision.json);
  - signature.json is dropped (only the machine key can sign, and the attacker has none);
  - MANIFEST.sha256 is recomputed over every file.
Every hash then agrees: `kwb verify` finds the bundle intact, but can only call it "self-consistent only", and
`kwb keep` refuses it (exit 77) because the manifest's digest is not the one this machine's ledger recorded at the
end of the run. tests/integration/ledger_e2e_test.cpp runs it on a genuine KEEP_CANDIDATE bundle.
"""

import hashlib
import json
import os
import sys
from pathlib import Path


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def replace_everywhere(bundle, old, new):
    """Rewrites `old` to `new` in every JSON file of the bundle."""
    for path in bundle.rglob("*.json"):
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, new))


def write_manifest(bundle):
    lines = []
    for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
        rel = path.relative_to(bundle).as_posix()
        if rel in ("MANIFEST.sha256", "signature.json"):
            continue
        lines.append(f"{sha256_bytes(path.read_bytes())}  {rel}\n")
    lines.sort(key=lambda line: line[66:])
    (bundle / "MANIFEST.sha256").write_text("".join(lines))


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 64
    bundle = Path(sys.argv[1])
    new_source = Path(sys.argv[2]).resolve()
    plan_path = bundle / "plan.json"
    plan = json.loads(plan_path.read_text())
    candidate = next(i for i in plan["implementations"] if i.get("role") == "candidate")
    old_sha = candidate["identity"]["source_sha256"]
    old_copy = bundle / candidate["bundle_source"]
    new_bytes = new_source.read_bytes()
    new_sha = sha256_bytes(new_bytes)
    new_copy = old_copy.with_name(new_sha + old_copy.suffix)
    new_copy.write_bytes(new_bytes)
    if old_copy != new_copy and old_sha not in (
        i["identity"].get("source_sha256") for i in plan["implementations"] if i is not candidate and "identity" in i
    ):
        old_copy.unlink()

    # The candidate (and its layout builds) now name the new source.
    old_path = candidate["source"]
    for impl in plan["implementations"]:
        if impl.get("source") == old_path and impl.get("role", "").startswith("candidate"):
            impl["source"] = str(new_source)
    plan_text = json.dumps(plan, indent=2, sort_keys=True) + "\n"
    plan_text = plan_text.replace(old_sha, new_sha)
    old_digest = sha256_bytes(plan_path.read_bytes())
    plan_path.write_text(plan_text)
    replace_everywhere(bundle, old_sha, new_sha)
    new_digest = sha256_bytes(plan_path.read_bytes())
    replace_everywhere(bundle, old_digest, new_digest)

    signature = bundle / "signature.json"
    if signature.exists():
        signature.unlink()
    write_manifest(bundle)
    print(f"re-hashed {bundle}: candidate source {old_sha[:12]} -> {new_sha[:12]} ({new_source}), plan digest "
          f"{old_digest[:12]} -> {new_digest[:12]}, manifest recomputed, signature dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
