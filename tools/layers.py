#!/usr/bin/env python3
"""tools/layers.py: check that the files of a module call only downward, as docs/architecture.md says.

docs/architecture.md holds one fenced block per layered module, whose info string is `layers DIR`:

    ```layers worker/diloco
    public diloco_
    # file        names            → files it may call
    session.c     session_         → group.c streaming.c ...
    ...
    control.c     dl_              →
    ```

Files are listed from the top down; each line says which names the file defines (prefixes) and which
files it may call. The check reads the objects the build made of DIR (build/DIR/**/*.o) with `nm` and
fails when
  - a file's line lists a file that is not below it (the list itself would allow a circle);
  - an object calls (or reads) a global symbol defined in another object of DIR whose file is not in
    its line: an upward call, or one the list does not allow; the symbol is printed;
  - a global symbol's longest matching prefix (of all the lines) is not its own file's, or no prefix
    matches: a name that lies about its file (names starting with a `public` prefix, the module's API,
    may be in any file);
  - an object of DIR has no line, or a line names a file that was not built.
Another module (e.g. the shard-server) is layered by adding its own block.

A block may layer folders instead of files (common/: a line's first word ends with `/`):

    ```layers common
    redis/   → net/ format/ math/ base/
    ...
    base/    →
    extern hiredis redis[A-Z]|freeReplyObject → redis/
    ```

Then the check fails when a folder's line lists one not below it, an object of a folder calls a global
symbol defined in another folder not in its line, a source or header of a folder includes a header of
another folder (`#include "math/codec.h"`) not in its line, or a folder with sources has no line. An
`extern NAME REGEX → folders` line says which folders may use a library: an undefined symbol matching
REGEX, or an `#include <NAME/...>`, anywhere else fails. Prefixes are not checked in a folder block.

A block may name `knot`s, one a line (`knot a.c b.c ...`): files not straightened yet, which still call
each other both ways. A knot's lines must follow one another in the list (so the knot is one node of an
otherwise downward graph); calls between its files need not be listed and are not checked, everything
else about them is. Knots are printed on every run, so they do not go unnoticed; the goal is none.

Usage (from the tree's root): tools/layers.py [--doc docs/architecture.md] [--build build] [DIR ...] (default:
every block).
Exit 0 when every block holds, 1 with one line per violation otherwise, 2 on a usage or setup error.
"""
import argparse
import os
import re
import subprocess
import sys

ARROW = "→"


def parse_blocks(text):
    """{dir: {"public": [prefixes], "order": [file], "prefixes": {file: [..]}, "calls": {file: [..]}}}"""
    blocks = {}
    for m in re.finditer(r"^```layers[ \t]+(\S+)[ \t]*\n(.*?)^```", text, re.S | re.M):
        d, body = m.group(1), m.group(2)
        b = {"public": [], "knot": [], "order": [], "prefixes": {}, "calls": {}, "folders": False, "extern": []}
        for raw in body.splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("public "):
                b["public"] += line.split()[1:]
                continue
            if line.startswith("knot "):
                b["knot"].append(line.split()[1:])
                continue
            left, _, right = line.partition(ARROW)
            words = left.split()
            if line.startswith("extern ") and len(words) == 3:
                b["extern"].append((words[1], re.compile(words[2]), right.split()))
                continue
            if words and words[0].endswith("/") and len(words) == 1:
                b["folders"] = True
            elif not words or not words[0].endswith(".c"):
                raise ValueError(f"layers {d}: cannot read the line '{raw.strip()}' (file.c prefixes → files)")
            f = words[0]
            if f in b["calls"]:
                raise ValueError(f"layers {d}: {f} is listed twice")
            b["order"].append(f)
            b["prefixes"][f] = words[1:]
            b["calls"][f] = right.split()
        blocks[d] = b
    return blocks


def nm(objs, *flags):
    """{file: [nm lines]} for {file: object path}, with one nm run (-A prefixes each line with its path)."""
    by_path = {o: f for f, o in objs.items()}
    out = subprocess.run(["nm", "-A", *flags, *by_path], check=True, capture_output=True, text=True).stdout
    lines = {f: [] for f in objs}
    for line in out.splitlines():
        path, _, rest = line.partition(":")
        if path in by_path:
            lines[by_path[path]].append(rest)
    return lines


def objects(build, d):
    """{file.c (relative to d): object path} for every object built from a source file of d (an object
    left behind by a source since removed is not one)."""
    root = os.path.join(build, d)
    objs = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), root)
            if n.endswith(".o") and os.path.exists(os.path.join(d, rel[:-2] + ".c")):
                objs[rel[:-2] + ".c"] = os.path.join(dirpath, n)
    return objs


def check_order(d, order, calls, rank):
    """The list itself: every name a line may call has a line below it (so the list allows no circle)."""
    bad = []
    for f in order:
        for g in calls[f]:
            if g not in rank:
                bad.append(f"{d}/{f} may call {g}, which has no line")
            elif rank[g] <= rank[f]:
                bad.append(f"{d}/{f} may call {g}, which is not below it in the list (a circle)")
    return bad


def folder_sources(d, folder):
    """{path: text} of the .c and .h files of d/folder."""
    root, out = os.path.join(d, folder), {}
    for n in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if n.endswith((".c", ".h")):
            with open(os.path.join(root, n), encoding="utf-8") as fh:
                out[os.path.join(root, n)] = fh.read()
    return out


def check_folders(d, b, build):
    """A block of folders (see the module's comment): calls (nm), includes and libraries."""
    bad = []
    order, calls = b["order"], b["calls"]
    rank = {f: i for i, f in enumerate(order)}
    bad += check_order(d, order, calls, rank)
    objs = objects(build, d)
    if not objs:
        return [f"no objects under {build}/{d}: build first (make all)"]
    folder_of = {f: f.split("/")[0] + "/" for f in objs}
    for f in sorted({folder_of[f] for f in objs} - set(rank)):
        bad.append(f"{d}/{f} has sources but no line in the layers of {d}")
    defined = {}
    for f, lines in nm(objs, "-g", "--defined-only").items():
        for line in lines:
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRCVWi":
                defined[parts[2]] = f
    for f, lines in sorted(nm(objs, "-u").items()):
        mine = folder_of[f]
        for line in lines:
            sym = line.split()[-1]
            g = defined.get(sym)
            if g is not None and folder_of[g] != mine and folder_of[g] not in calls.get(mine, []):
                where = "above it" if rank.get(folder_of[g], -1) < rank.get(mine, -1) else "not in its line"
                bad.append(f"{d}/{f} calls {sym} ({d}/{g}, {folder_of[g]} {where})")
            for name, rx, allowed in b["extern"]:
                if g is None and rx.fullmatch(sym) and mine not in allowed:
                    bad.append(f"{d}/{f} uses {name} ({sym}), which only {' '.join(allowed)} may")
    inc = re.compile(r'^\s*#\s*include\s+([<"])([^">]+)[">]', re.M)
    for folder in order:
        for path, text in folder_sources(d, folder).items():
            for m in inc.finditer(text):
                target = m.group(2)
                top = target.split("/")[0] + "/"
                if m.group(1) == '"' and top in rank and top != folder and top not in calls[folder]:
                    bad.append(f"{path} includes {target} ({top} is not in the line of {folder})")
                for name, _, allowed in b["extern"]:
                    if m.group(1) == "<" and target.startswith(name + "/") and folder not in allowed:
                        bad.append(f"{path} includes <{target}>, which only {' '.join(allowed)} may")
    return bad


def check(d, b, build):
    if b["folders"]:
        return check_folders(d, b, build)
    bad = []
    order, calls = b["order"], b["calls"]
    rank = {f: i for i, f in enumerate(order)}
    knot = {}  # file -> index of its knot
    for i, k in enumerate(b["knot"]):
        for f in k:
            if f not in rank:
                bad.append(f"{d}: the knot of {' '.join(k)} names {f}, which has no line")
            elif f in knot:
                bad.append(f"{d}: {f} is in two knots")
            knot[f] = i
        kr = sorted(rank[f] for f in k if f in rank)
        if kr and kr[-1] - kr[0] + 1 != len(kr):
            bad.append(f"{d}: the knot's lines ({' '.join(k)}) do not follow one another")
    bad += check_order(d, order, calls, rank)
    objs = objects(build, d)
    if not objs:
        return [f"no objects under {build}/{d}: build first (make all)"]
    for f in sorted(set(objs) - set(rank)):
        bad.append(f"{d}/{f} was built but has no line in the layers of {d}")
    for f in order:
        if f not in objs:
            bad.append(f"{d}/{f} has a line but no object {build}/{d}/{f[:-2]}.o")
    defined = {}  # symbol -> file
    for f, lines in nm(objs, "-g", "--defined-only").items():
        for line in lines:
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRCVW":
                defined[parts[2]] = f
    allp = [(p, f) for f in order for p in b["prefixes"][f]]
    for sym, f in sorted(defined.items()):
        if any(sym.startswith(p) for p in b["public"]) or f not in rank:
            continue
        match = max((pf for pf in allp if sym.startswith(pf[0])), key=lambda pf: len(pf[0]), default=None)
        if match is None:
            bad.append(f"{d}/{f} defines {sym}, which starts with no prefix of the list")
        elif match[1] != f:
            bad.append(f"{d}/{f} defines {sym}, whose prefix {match[0]} is {match[1]}'s")
    for f, lines in sorted(nm(objs, "-u").items()):
        if f not in rank:
            continue
        for line in lines:
            sym = line.split()[-1]
            g = defined.get(sym)
            if g is None or g == f or g not in rank:
                continue
            if g not in calls[f] and not (f in knot and knot.get(g) == knot[f]):
                where = "above it" if rank[g] < rank[f] else "not in its line"
                bad.append(f"{d}/{f} calls {sym} ({g}, {where})")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--doc", default="docs/architecture.md")
    ap.add_argument("--build", default="build")
    ap.add_argument("dirs", nargs="*")
    a = ap.parse_args()
    try:
        with open(a.doc, encoding="utf-8") as fh:
            blocks = parse_blocks(fh.read())
    except (OSError, ValueError) as e:
        print(f"layers: {e}", file=sys.stderr)
        return 2
    dirs = a.dirs or sorted(blocks)
    if not dirs:
        print(f"layers: {a.doc} has no ```layers DIR block", file=sys.stderr)
        return 2
    failed = 0
    for d in dirs:
        if d not in blocks:
            print(f"layers: {a.doc} has no ```layers {d} block", file=sys.stderr)
            return 2
        bad = check(d, blocks[d], a.build)
        for line in bad:
            print(f"layers: {line}")
        if bad:
            failed = 1
        elif blocks[d]["knot"]:
            ks = "; ".join(f"{len(k)} files ({' '.join(k)})" for k in blocks[d]["knot"])
            print(f"layers: {d}: {len(blocks[d]['order'])} files, every call downward but within the knots, "
                  f"whose files still call each other: {ks}")
        else:
            kind = "folders" if blocks[d]["folders"] else "files"
            print(f"layers: {d}: {len(blocks[d]['order'])} {kind}, every call downward")
    return failed


if __name__ == "__main__":
    sys.exit(main())
