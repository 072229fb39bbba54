#!/usr/bin/env python3
"""tools/doc_refs.py: every `docs/<file>.md "Section"` that a source file cites names a heading that exists.

Comments point readers at the documentation as docs/<file>.md "Section" (or docs/<file>.md, "Section"; the
quote may start the next comment line). A heading is found when its text, without the leading #s and
backquotes, starts with the cited section (case and a trailing period aside), so "A sync round" finds
"## A sync round (sync mode)". Sources: the tracked text files of the tree (git ls-files when the tree
is a git checkout, else every file but build/ and bin/), docs/ itself included.

Usage: tools/doc_refs.py [ROOT]. Exit 0 when every citation resolves, 1 listing those that do not.
"""
import os
import re
import subprocess
import sys

# the document, then a comma or blanks (or a line break and a comment leader), then the quoted section,
# which starts with a letter or a backquote (so a shell or C string after the name is no citation)
CITE = re.compile(r'docs/([A-Za-z0-9_./-]+\.md)(?:,?[ \t]*\n[ \t]*(?:\*|//|--|#)?[ \t]*|,[ \t]*|[ \t]+)"([A-Za-z`][^"\n]*)"')
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
SOURCE_EXT = (".c", ".h", ".cu", ".lua", ".py", ".sh", ".md", ".txt", ".toml", ".yml", ".yaml", "Makefile")


def sources(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True, text=True).stdout
        files = out.splitlines()
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, names in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".git", "build", "bin")]
            files += [os.path.relpath(os.path.join(dirpath, n), root) for n in names]
    return sorted(f for f in files if f.endswith(SOURCE_EXT))


def norm(text):
    return re.sub(r"\s+", " ", text.replace("`", "")).strip().rstrip(".").lower()


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    headings = {}
    bad, n = [], 0
    for f in sources(root):
        try:
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError):
            continue
        for m in CITE.finditer(text):
            doc, section = m.group(1), m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            n += 1
            if doc not in headings:
                try:
                    with open(os.path.join(root, "docs", doc), encoding="utf-8") as dh:
                        headings[doc] = [norm(h) for h in HEADING.findall(dh.read())]
                except OSError:
                    headings[doc] = None
            if headings[doc] is None:
                bad.append(f'{f}:{line}: cites docs/{doc} "{section}", and there is no docs/{doc}')
            elif not any(h.startswith(norm(section)) for h in headings[doc]):
                bad.append(f'{f}:{line}: cites docs/{doc} "{section}", which has no such heading')
    for line in bad:
        print(f"doc_refs: {line}")
    if not bad:
        print(f"doc_refs: all {n} citations of a docs/ section resolve")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
