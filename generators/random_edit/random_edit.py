#!/usr/bin/env python3
"""kwb experiment generator "random_edit": semantics-preserving textual edits of the incumbent.

A null arm for `kwb experiment`: each attempt takes the trajectory's incumbent (KWB_INCUMBENT), applies a few edits
that cannot change what the compiled kernel does, and writes the result to KWB_OUTPUT, with the list of edits as
the attempt's meta (KWB_OUTPUT + ".json"). Its candidates are correct and, up to noise, exactly as fast as the
incumbent, so an experiment should keep (almost) none of them: a referee that keeps many is fooled by noise.

The edits, 3 to 5 per attempt, drawn with random.Random(f"random_edit:{seed}:{attempt}"):
  comment        a `// kwb random edit ...` line at a line boundary outside any comment, string or macro
  blank_line     an empty line at such a boundary
  static_assert  `static_assert(true, "kwb random edit N");` at namespace scope, between two declarations
  unused_static  `[[maybe_unused]] static int kwb_edit_A_N = N;` at namespace scope, between two declarations
  swap_includes  two adjacent `#include <...>` lines (system headers, independent of each other) swapped
(C sources get `_Static_assert(1, ...)` and `__attribute__((unused)) static int`.)

Deterministic: same incumbent text, seed and attempt give the same bytes. Exit 2: the environment is incomplete
(no KWB_OUTPUT or unreadable KWB_INCUMBENT), so no candidate. Python 3 standard library only.
"""

import json
import os
import random
import re
import sys

INCLUDE_SYS = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<[^>\n]+>[ \t]*$")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def scan(text):
    """Line boundaries of a C/C++ source and what may be inserted at each.

    Returns (lines, info) where info[k] describes the boundary before line k (k = 0 .. len(lines)):
      "free": a comment or blank line may go there (not inside a block comment, raw string or continued line);
      "decl": a namespace-scope declaration may go there too (every enclosing brace is a namespace or an
              extern "C" block, no open parenthesis, and the last token before it ends a declaration).
    """
    lines = text.split("\n")
    # Declarations go after the last #include: nothing inserted can then interact with a header.
    last_include = max((k for k, line in enumerate(lines) if re.match(r"[ \t]*#[ \t]*include\b", line)), default=-1)
    info = []
    state = "code"  # code | block_comment | raw_string
    raw_end = ""
    braces = []  # True for a namespace-like block
    parens = 0
    tokens = []  # significant tokens at the current position (recent ones only)
    last_closed_ns = False
    for k, line in enumerate(lines):
        prev = lines[k - 1] if k > 0 else ""
        continued = k > 0 and prev.endswith("\\")
        free = state == "code" and not continued
        last = tokens[-1] if tokens else None
        decl = (
            free
            and k > last_include
            and not (k < len(lines) and prev.lstrip().startswith("//") and line.lstrip().startswith("//"))
            and parens == 0
            and all(braces)
            and (last is None or last == ";" or (last == "{" and braces and braces[-1]) or (last == "}" and last_closed_ns))
        )
        info.append({"free": free, "decl": decl})
        # A preprocessor directive (and its continuation lines) holds no C++ tokens for our purposes.
        if state == "code" and not continued and line.lstrip().startswith("#"):
            directive = True
        else:
            directive = continued and state == "code" and _in_directive(lines, k)
        i = 0
        n = len(line)
        while i < n:
            c = line[i]
            if state == "block_comment":
                end = line.find("*/", i)
                if end < 0:
                    i = n
                else:
                    state = "code"
                    i = end + 2
                continue
            if state == "raw_string":
                end = line.find(raw_end, i)
                if end < 0:
                    i = n
                else:
                    state = "code"
                    i = end + len(raw_end)
                    if not directive:
                        tokens.append("STR")
                continue
            if line.startswith("//", i):
                break
            if line.startswith("/*", i):
                state = "block_comment"
                i += 2
                continue
            m = re.match(r'(?:u8|u|U|L)?R"([^()\\ \t]{0,16})\(', line[i:])
            if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
                state = "raw_string"
                raw_end = ")" + m.group(1) + '"'
                i += m.end()
                continue
            if c == '"' or c == "'":
                j = i + 1
                while j < n and line[j] != c:
                    j += 2 if line[j] == "\\" else 1
                i = j + 1
                if not directive:
                    tokens.append("STR" if c == '"' else "CHR")
                continue
            if c.isspace():
                i += 1
                continue
            m = IDENT.match(line, i)
            if m:
                if not directive:
                    tokens.append(m.group(0))
                i = m.end()
                continue
            if directive:
                i += 1
                continue
            if c == "{":
                braces.append(_namespace_like(tokens))
            elif c == "}":
                last_closed_ns = braces.pop() if braces else False
            elif c in "([":
                parens += 1
            elif c in ")]":
                parens = max(0, parens - 1)
            tokens.append(c)
            i += 1
        if len(tokens) > 64:
            del tokens[:-32]
    return lines, info


def _in_directive(lines, k):
    j = k
    while j > 0 and lines[j - 1].endswith("\\"):
        j -= 1
    return lines[j].lstrip().startswith("#")


def _namespace_like(tokens):
    # namespace {   namespace a {   namespace a::b {   inline namespace a {   extern "C" {
    t = tokens
    if t and t[-1] == "namespace":
        return True
    if len(t) >= 2 and t[-2:] == ["extern", "STR"]:
        return True
    j = len(t) - 1
    while j >= 0 and IDENT.fullmatch(t[j] or "") and t[j] != "namespace":
        j -= 1
        if j >= 1 and t[j] == ":" and t[j - 1] == ":":
            j -= 2
            continue
        break
    return j >= 0 and t[j] == "namespace"


def fresh_name(text, base):
    name = base
    suffix = 0
    while re.search(r"\b" + re.escape(name) + r"\b", text):
        suffix += 1
        name = f"{base}_{suffix}"
    return name


def apply_edits(text, seed, attempt, is_c=False):
    rng = random.Random(f"random_edit:{seed}:{attempt}")
    count = rng.randint(3, 5)
    edits = []
    for index in range(1, count + 1):
        lines, info = scan(text)
        free = [k for k, b in enumerate(info) if b["free"]]
        decl = [k for k, b in enumerate(info) if b["decl"]]
        swaps = [
            k
            for k in range(len(lines) - 1)
            if INCLUDE_SYS.match(lines[k]) and INCLUDE_SYS.match(lines[k + 1]) and lines[k] != lines[k + 1]
            and info[k + 1]["free"] and info[k]["free"]
        ]
        kinds = ["comment", "blank_line"]
        if decl:
            kinds += ["static_assert", "unused_static"]
        if swaps:
            kinds.append("swap_includes")
        kind = rng.choice(kinds)
        tag = f"kwb random edit {attempt}.{index}"
        if kind == "swap_includes":
            k = rng.choice(swaps)
            lines[k], lines[k + 1] = lines[k + 1], lines[k]
            edits.append({"kind": kind, "line": k + 1, "text": [lines[k].strip(), lines[k + 1].strip()]})
        else:
            if kind in ("comment", "blank_line"):
                k = rng.choice(free)
                new = f"// {tag} (seed {seed}): no code change" if kind == "comment" else ""
            elif kind == "static_assert":
                k = rng.choice(decl)
                new = (f'_Static_assert(1, "{tag}");' if is_c else f'static_assert(true, "{tag}");')
            else:
                k = rng.choice(decl)
                name = fresh_name(text, f"kwb_edit_{attempt}_{index}")
                value = rng.randint(1, 1 << 20)
                new = (f"__attribute__((unused)) static int {name} = {value};" if is_c
                       else f"[[maybe_unused]] static int {name} = {value};")
            # A boundary past the last line (a file without a final newline) is the end of the file.
            lines.insert(k, new)
            edits.append({"kind": kind, "line": k + 1, "text": new})
        text = "\n".join(lines)
    return text, edits


def main():
    output = os.environ.get("KWB_OUTPUT")
    incumbent = os.environ.get("KWB_INCUMBENT")
    if not output or not incumbent:
        print("random_edit: KWB_OUTPUT and KWB_INCUMBENT must be set; no candidate", file=sys.stderr)
        return 2
    try:
        seed = int(os.environ.get("KWB_SEED") or "0")
        attempt = int(os.environ.get("KWB_ATTEMPT") or "1")
    except ValueError:
        print("random_edit: KWB_SEED and KWB_ATTEMPT must be integers; no candidate", file=sys.stderr)
        return 2
    try:
        with open(incumbent, "rb") as f:
            data = f.read()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        print(f"random_edit: cannot read the incumbent {incumbent}: {e}; no candidate", file=sys.stderr)
        return 2
    is_c = output.endswith(".c")
    edited, edits = apply_edits(text, seed, attempt, is_c)
    meta = {"generator": "random_edit", "seed": seed, "attempt": attempt, "edits": edits}
    tmp = output + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(edited)
    os.replace(tmp, output)
    with open(output + ".json.tmp", "w", encoding="utf-8") as f:
        f.write(json.dumps(meta, sort_keys=True) + "\n")
    os.replace(output + ".json.tmp", output + ".json")
    print(f"random_edit: attempt {attempt} seed {seed}: {', '.join(e['kind'] for e in edits)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
