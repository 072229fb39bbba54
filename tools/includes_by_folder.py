#!/usr/bin/env python3
"""tools/includes_by_folder.py: write every include of a common/ header in its folder form.

common/ is on the include path as one directory (-Icommon), so its headers are named with their folder:
`#include "base/log.h"`, `#include "redis/rconn.h"`; a bare `#include "log.h"` no longer compiles. This
rewrites a tree's includes to that form (and sorts each run of such includes): a bare name (or one with a stale folder) that is a header of
common/<folder>/ becomes "<folder>/name", unless the including file's own folder (outside common/) has
a header of that name, which the compiler would find first. Branches made before the switch run it
after merging main.

Usage (from the tree's root): tools/includes_by_folder.py [--check]. With --check it changes nothing and
exits 1 listing the includes it would rewrite.
"""
import os
import re
import sys

FOLDERS = ("base", "format", "math", "net", "redis")
SOURCES = (".c", ".h", ".cu", ".cuh")
SKIP = {"build", "bin", ".git", "shared", "node_modules"}
INCLUDE = re.compile(r'^(\s*#\s*include\s+")([^"]+)(")', re.M)


def common_headers():
    found = {}
    for folder in FOLDERS:
        d = os.path.join("common", folder)
        for name in os.listdir(d) if os.path.isdir(d) else []:
            if name.endswith(".h"):
                if name in found:
                    sys.exit(f"includes_by_folder: {name} is in common/{found[name]} and common/{folder}")
                found[name] = folder
    return found


def rewrite(path, headers):
    here = os.path.dirname(path)
    local = here.split(os.sep)[0] != "common"

    def fix(m):
        name = m.group(2)
        base = os.path.basename(name)
        if base not in headers or (name != base and name.split("/")[0] not in FOLDERS):
            return m.group(0)
        if local and name == base and os.path.exists(os.path.join(here, base)):
            return m.group(0)
        return m.group(1) + headers[base] + "/" + base + m.group(3)

    with open(path) as f:
        text = f.read()
    new = sort_runs(INCLUDE.sub(fix, text))
    return text, new


def sort_runs(text):
    """Each run of consecutive `#include "..."` lines that names a common/ header, in sorted order (the
    folder is part of the name now, so the order the bare names had is gone)."""
    lines, out, run = text.split("\n"), [], []

    def flush():
        if any(INCLUDE.match(l).group(2).split("/")[0] in FOLDERS for l in run):
            run.sort(key=lambda l: INCLUDE.match(l).group(2))
        out.extend(run)
        run.clear()

    for line in lines:
        if INCLUDE.match(line) and line.strip().startswith("#include"):
            run.append(line)
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


def main():
    check = "--check" in sys.argv[1:]
    headers = common_headers()
    changed = []
    for root, dirs, files in os.walk("."):
        dirs[:] = [d for d in dirs if d not in SKIP]
        for name in files:
            if not name.endswith(SOURCES):
                continue
            path = os.path.relpath(os.path.join(root, name))
            text, new = rewrite(path, headers)
            if new != text:
                changed.append(path)
                if not check:
                    with open(path, "w") as f:
                        f.write(new)
    for path in changed:
        print(("would rewrite " if check else "rewrote ") + path)
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
