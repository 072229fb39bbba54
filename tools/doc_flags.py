#!/usr/bin/env python3
"""tools/doc_flags.py: the flags of the binaries and the flags the documentation shows agree.

Two checks, against the `--help` of each binary (and subcommand) of BINDIR:
  1. every flag a `--help` lists is named (`--flag`) somewhere in README.md or docs/*.md, so a flag added
     to a binary cannot stay undocumented (`coordinator repair --wait` once was);
  2. every flag that a command line of README.md or docs/*.md passes to bin/coordinator SUB,
     bin/shard-server, bin/worker [prepare-data], bin/delay-proxy or `python3 -m rediloco init` is one that
     binary's `--help` lists, so a renamed or removed flag cannot stay in an example. A command runs to the
     end of its line (a trailing backslash continues it), or to a backquote, `|`, `#` or `;`.

Usage: tools/doc_flags.py [ROOT [BINDIR]] (ROOT: where README.md and docs/ are, default .; BINDIR: the
built binaries, default ROOT/bin). Exit 0 when both hold, 1 listing what does not.
"""
import glob
import os
import re
import subprocess
import sys

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
# documented name -> the --help to ask (argv after the binary)
COMMANDS = {
    "coordinator init": ("coordinator", "init"),
    "coordinator status": ("coordinator", "status"),
    "coordinator serve": ("coordinator", "serve"),
    "coordinator control": ("coordinator", "control"),
    "coordinator checkpoint": ("coordinator", "checkpoint"),
    "coordinator repair": ("coordinator", "repair"),
    "coordinator load-library": ("coordinator", "load-library"),
    "shard-server": ("shard-server",),
    "worker prepare-data": ("worker", "prepare-data"),
    "worker": ("worker",),
    "delay-proxy": ("delay-proxy",),
}
COMMAND_LINE = re.compile(r"(?:bin/|python3 -m rediloco )(" + "|".join(
    re.escape(c) + r"\b" for c in sorted(COMMANDS, key=len, reverse=True)) + r"|init\b)([^`|#;]*)")


def help_flags(bindir, argv):
    p = subprocess.run([os.path.join(bindir, argv[0])] + list(argv[1:]) + ["--help"], capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        sys.exit("doc_flags: %s --help: exit %d" % (" ".join(argv), p.returncode))
    return set(FLAG.findall(p.stdout + p.stderr)) | {"--help"}


def doc_lines(root):
    """(file, line number, text) of README.md and docs/*.md, a trailing backslash joining the next line."""
    for path in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        lines = open(path, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            start, text = i, lines[i]
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1] + " " + lines[i]
            yield os.path.relpath(path, root), start + 1, text
            i += 1


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bindir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "bin")
    flags = {name: help_flags(bindir, argv) for name, argv in COMMANDS.items()}
    flags["init"] = flags["coordinator init"]  # python3 -m rediloco init is coordinator init
    documented, bad, commands = set(), [], 0
    for path, n, text in doc_lines(root):
        documented.update(FLAG.findall(text))
        for m in COMMAND_LINE.finditer(text):
            commands += 1
            for f in FLAG.findall(m.group(2)):
                if f not in flags[m.group(1)]:
                    bad.append("%s:%d: %s has no %s (its --help does not list it)" % (path, n, m.group(1), f))
    for name in COMMANDS:
        for f in sorted(flags[name] - documented):
            bad.append("%s %s: in its --help, named nowhere in README.md or docs/" % (name, f))
    if bad:
        print("\n".join(bad))
        return 1
    print("doc_flags: %d flags of %d --help texts all documented; %d command lines in the docs use only those"
          % (len(set().union(*flags.values())), len(COMMANDS), commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
