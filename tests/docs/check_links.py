#!/usr/bin/env python3
"""Checks that the documentation points only at things that exist.

Usage: check_links.py SOURCE_DIR

In README.md, ARCHITECTURE.md, docs/*.md and bench/README.md:
- every relative Markdown link, [text](path) or [text](path#anchor), names an existing file or folder (resolved
  from the Markdown file's folder), and its anchor, if any, a heading of that file;
- every repository path written in the text (src/..., docs/..., tests/..., the other top-level folders) names an
  existing file or folder, resolved from the repository's root as the documents write them (src/x.{h,cpp} names
  both).
In ARCHITECTURE.md, the map of the tree (its indented entries, "    name/   what it holds"):
- every top-level folder of the repository and every folder of src/ has an entry of its own, and every folder of
  tests/ is named (as "name/") in the tests/ entry; folders git ignores (build/, third_party/) and hidden ones are
  not part of the tree.
In README.md and docs/task-format.md, the task bank:
- README's sentence "are N operators of LLM inference in `tasks/` (a, b, ...)" and docs/task-format.md's task table
  name exactly the folders of tasks/ that hold a task.toml, and N is their number in words.
Prints each broken reference as FILE:LINE: what, and exits 1 if there is any.
"""
import re
import sys
from pathlib import Path

DOCUMENTS = ["README.md", "ARCHITECTURE.md", "docs/*.md", "bench/README.md"]
# Top-level folders whose paths the documents name in their text.
FOLDERS = ["src", "docs", "tests", "scripts", "bench", "include", "schemas", "tasks", "cmake", ".ci"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./+-]*(?:\{[\w.,]+\}|[\w/]))" % "|".join(re.escape(f) for f in FOLDERS))
LINK_TARGET = re.compile(r"(\[[^\]]*\])\([^)\s]+\)")
FENCE = re.compile(r"^\s*```")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    # Backticks and asterisks are markup; an underscore is markup only at a word's edge (_emphasis_), and GitHub
    # keeps one inside a word (comparison_text).
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"(?<!\w)_|_(?!\w)", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def expand(path: str) -> list:
    """src/x.{h,cpp} -> [src/x.h, src/x.cpp]."""
    m = re.search(r"\{([^}]*)\}", path)
    return [path[: m.start()] + alt + path[m.end() :] for alt in m.group(1).split(",")] if m else [path]


def anchors(path: Path) -> set:
    found, counts, fenced = set(), {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = counts.get(s, 0)
            counts[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
    return found


def check(root: Path, doc: Path) -> list:
    errors = []
    rel = doc.relative_to(root)
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        where = f"{rel}:{number}"
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (doc.parent / path_part).resolve() if path_part else doc
            if not resolved.exists():
                errors.append(f"{where}: link to {target}: {path_part} does not exist")
            elif anchor and resolved.is_file() and resolved.suffix == ".md" and anchor not in anchors(resolved):
                errors.append(f"{where}: link to {target}: {resolved.relative_to(root)} has no heading #{anchor}")
        for written in PATH.findall(LINK_TARGET.sub(r"\1", line)):  # a link's target is checked above
            for path in expand(written):
                if not (root / path).exists():
                    errors.append(f"{where}: {path} does not exist")
    return errors


IGNORED = {"build", "third_party", "bundles", "out", "gpu-results", "__pycache__"}
ENTRY = re.compile(r"^    ([\w./-]+/)\s")


def check_map(root: Path) -> list:
    """ARCHITECTURE.md's map names every folder of the tree (see the module's doc)."""
    doc = root / "ARCHITECTURE.md"
    lines = doc.read_text(encoding="utf-8").splitlines()
    entries, tests_text, in_tests = set(), [], False
    for line in lines:
        m = ENTRY.match(line)
        if m:
            entries.add(m.group(1))
            in_tests = m.group(1) == "tests/"
        elif not line.startswith("    "):
            in_tests = False
        if in_tests:
            tests_text.append(line)
    tests_text = " ".join(tests_text)

    def folders(path: Path) -> list:
        return sorted(p.name for p in path.iterdir()
                      if p.is_dir() and not p.name.startswith(".") and p.name not in IGNORED)

    errors = []
    for name in folders(root):
        if f"{name}/" not in entries and not any(e.startswith(f"{name}/") for e in entries):
            errors.append(f"ARCHITECTURE.md: the map has no entry for the folder {name}/")
    for name in folders(root / "src"):
        if f"src/{name}/" not in entries:
            errors.append(f"ARCHITECTURE.md: the map has no entry for the folder src/{name}/")
    for name in folders(root / "tests"):
        if not re.search(r"(?<![\w-])%s/" % re.escape(name), tests_text):
            errors.append(f"ARCHITECTURE.md: the tests/ entry does not name the folder tests/{name}/")
    return errors


NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
           "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
BANK_SENTENCE = re.compile(r"are\s+(\w+)\s+operators of LLM inference in `tasks/`\s+\(([^)]*)\)", re.S)
TABLE_TASK = re.compile(r"^\| \[(\w+)\]\(\.\./tasks/|, \[(\w+)\]\(\.\./tasks/")


def check_task_list(root: Path) -> list:
    """README's bank sentence and docs/task-format.md's table name exactly the tasks under tasks/."""
    shipped = sorted(p.parent.name for p in (root / "tasks").glob("*/task.toml"))
    errors = []
    readme = (root / "README.md").read_text(encoding="utf-8")
    m = BANK_SENTENCE.search(readme)
    if not m:
        errors.append("README.md: no sentence 'are N operators of LLM inference in `tasks/` (...)' lists the bank")
    else:
        count, listed = m.group(1), sorted(n.strip() for n in m.group(2).replace("\n", " ").split(","))
        if listed != shipped:
            errors.append(f"README.md: the bank lists {listed}, tasks/ holds {shipped}")
        if count not in NUMBERS or NUMBERS.index(count) != len(shipped):
            errors.append(f"README.md: the bank is said to be '{count}' operators; tasks/ holds {len(shipped)}")
    table = set()
    for line in (root / "docs" / "task-format.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("| ["):
            table.update(a or b for a, b in TABLE_TASK.findall(line))
    if sorted(table) != shipped:
        errors.append(f"docs/task-format.md: the task table names {sorted(table)}, tasks/ holds {shipped}")
    return errors


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 64
    root = Path(sys.argv[1]).resolve()
    docs = sorted({p for pattern in DOCUMENTS for p in root.glob(pattern)})
    if not docs:
        print(f"check_links.py: no documents under {root}", file=sys.stderr)
        return 64
    errors = [e for doc in docs for e in check(root, doc)] + check_map(root) + check_task_list(root)
    for e in errors:
        print(e)
    print(f"check_links.py: {len(docs)} documents, {len(errors)} broken references")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
