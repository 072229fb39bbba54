#!/usr/bin/env python3
"""tools/doc_flags.py: the flags of the binaries and the flags the documentation shows agree.

Three checks, against the `--help` of each binary (and subcommand) of BINDIR:
  1. every flag a `--help` lists is named (`--flag`) somewhere in README.md or docs/*.md, so a flag added
     to a binary cannot stay undocumented (`coordinator repair --wait` once was);
  2. every flag that a command line of README.md or docs/*.md passes to bin/coordinator SUB,
     bin/shard-server, bin/worker [prepare-data], bin/delay-proxy or `python3 -m rediloco init` is one that
     binary's `--help` lists, so a renamed or removed flag cannot stay in an example. A command runs to the
     end of its line (a trailing backslash continues it), or to a backquote, `|`, `#` or `;`;
  3. every default a flag table of the docs gives (a table whose header is `| coordinator init | default |`,
     `| worker | default |` or `| shard-server, coordinator serve | default |` in README.md, or `| flag |
     default |` in docs/shard-server.md, docs/trainer.md and docs/cuda.md) is the one the flag's --help
     states ("(default 8)", "default: X", "X (default)", a trainer flag's "(8)"), so a default changed in
     the code cannot stay in a table. A row whose help states no default, or whose default cell does not
     give one value per flag, is not compared.

Usage: tools/doc_flags.py [ROOT [BINDIR]] (ROOT: where README.md and docs/ are, default .; BINDIR: the
built binaries, default ROOT/bin). Exit 0 when all three hold, 1 listing what does not.
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


# flag tables: header -> (command, part of its --help); "trainer" is the GPT trainer options of bin/worker
TABLES = {"coordinator init": [("coordinator init", "main")], "worker": [("worker", "main")],
          "shard-server, coordinator serve": [("shard-server", "main"), ("coordinator serve", "main")]}
FLAG_TABLES = {"docs/shard-server.md": [("shard-server", "main")], "docs/trainer.md": [("worker", "trainer")],
               "docs/cuda.md": [("worker", "trainer")]}
QUALIFIERS = {"(shard-server)": "shard-server", "(serve)": "coordinator serve"}
TRAINER_PART = "GPT trainer options"
FLAG_LINE = re.compile(r"^  (?:-\w, )?--[a-z]")
FLAG_LEAD = re.compile(r"^  ((?:(?:-\w, )?--[a-z][a-z0-9-]*(?: [A-Z][A-Z_|:\[\],.0-9]*| [a-z0-9]+(?:\|[a-z0-9]+)+)? ?)+)")


def help_text(bindir, argv):
    p = subprocess.run([os.path.join(bindir, argv[0])] + list(argv[1:]) + ["--help"], capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        sys.exit("doc_flags: %s --help: exit %d" % (" ".join(argv), p.returncode))
    return p.stdout + p.stderr


def help_defaults(text, trainer):
    """flag -> the defaults the --help text states for it (each as its first word and as the phrase up to
    `;`, `,` or `)`). trainer: the flags below TRAINER_PART, whose lines end in their default in
    parentheses; else the flags above it."""
    main, _, rest = text.partition(TRAINER_PART)
    blocks, cur = {}, []
    for line in (rest if trainer else main).split("\n"):
        lead = FLAG_LEAD.match(line) if FLAG_LINE.match(line) else None
        if lead:
            cur = FLAG.findall(lead.group(1))
            for f in cur:
                blocks[f] = blocks.get(f, "") + line
        elif cur and line.startswith("    "):
            for f in cur:
                blocks[f] += " " + line.strip()
        else:
            cur = []
    out = {}
    for f, t in blocks.items():
        said = [m.group(1) for m in re.finditer(r"(?:\(|; )default:? ([^;,)]+)", t)]
        said += [m.group(1) for m in re.finditer(r"(\S+) \((?:[^()]*, )?default[;,)]", t)]
        said += [m.group(1) for m in re.finditer(r"(\w+)(?:: [^,;()]*)?, the default\b", t)]
        m = re.search(r"\(([^()]*)\)$", t) if trainer else None
        if m and not FLAG.search(m.group(1)) and "default" not in m.group(1):
            said.append(re.split(r"[:;,]", m.group(1))[0])
        said = {w for s in said for w in (s.strip(), re.split(r"[\s:]", s.strip())[0]) if "'s" not in s}
        if said:
            out[f] = said
    return out


def help_flags(bindir, argv):
    return set(FLAG.findall(help_text(bindir, argv))) | {"--help"}


def without_parentheses(s):
    while True:
        t = re.sub(r"\([^()]*\)", "", s)
        if t == s:
            return s
        s = t


def table_defaults(root):
    """(file, line number, command, part, flag, default) of every row of a flag table that gives one
    default per flag it names (`0.7, 0.5` for two flags, or `4e-4 0.9` in docs/trainer.md)."""
    for path in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        rel, table = os.path.relpath(path, root), None
        for n, line in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
            c = [x.strip() for x in re.split(r"(?<!\\)\|", line.strip())[1:-1]] if line.startswith("|") else []
            if len(c) < 2:
                table = None
            elif c[1] == "default":
                table = TABLES.get(c[0]) or (FLAG_TABLES.get(rel) if c[0] == "flag" else None)
            elif table and not c[0].startswith("---"):
                flags = FLAG.findall(c[0])
                cmds = [t for t in table if not any(c[0].endswith(q) and t[0] != cmd for q, cmd in QUALIFIERS.items())]
                value = without_parentheses(c[1]).replace("`", "").strip()
                values = [v.strip() for v in value.split(", ")] if value else []
                if len(values) == 1 and len(flags) > 1:
                    values = value.split()
                if len(values) == len(flags) and "run's" not in value:
                    for f, v in zip(flags, values):
                        for cmd, part in cmds:
                            yield rel, n, cmd, part, f, v


def same_default(doc, said):
    """doc (a table's default) is one of said (its --help's): as text without a leading "the" or the
    blanks around operators (`workers - 1` is `workers-1`), or as a number (4e-4 is 0.0004)."""
    def norm(s):
        return re.sub(r"\s*([-+*/])\s*", r"\1", re.sub(r"^the ", "", s))
    if norm(doc) in {norm(s) for s in said}:
        return True
    try:
        return any(float(doc) == float(s) for s in said if re.match(r"^[-+.\deE]+$", s))
    except ValueError:
        return False


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
    stated, defaults = {}, 0
    for path, n, cmd, part, f, value in table_defaults(root):
        if (cmd, part) not in stated:
            stated[cmd, part] = help_defaults(help_text(bindir, COMMANDS[cmd]), part == "trainer")
        said = stated[cmd, part].get(f)
        if said:
            defaults += 1
            if not same_default(value, said):
                bad.append("%s:%d: %s %s: default %s in the table, but its --help says %s" % (
                    path, n, cmd, f, value, max(said, key=len)))
    if bad:
        print("\n".join(bad))
        return 1
    print("doc_flags: %d flags of %d --help texts all documented; %d command lines in the docs use only those;"
          " %d defaults in flag tables equal their --help's" % (len(set().union(*flags.values())), len(COMMANDS),
                                                                 commands, defaults))
    return 0


if __name__ == "__main__":
    sys.exit(main())
