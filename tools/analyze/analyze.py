#!/usr/bin/env python3
"""tools/analyze/analyze.py DIR SOURCE...: the findings of three static analyzers on the product's C.

`make analyze` first builds every SOURCE into DIR (build/analyze/) through tools/analyze/cc.sh, which
compiles with GCC's -fanalyzer and keeps, beside each object, its diagnostics (OBJ.analyzer) and its
command line (OBJ.cmd). This script then
  - reads the GCC analyzer's diagnostics from the OBJ.analyzer files;
  - writes DIR/compile_commands.json from the OBJ.cmd files (the project's own flags per file: the
    -mavx2 of the AVX2 kernels, -fopenmp of the trainer) and runs cppcheck on it
    (--enable=warning,performance,portability --inline-suppr);
  - runs clang-tidy (CHECKS and TIDY_CONFIG below) on each SOURCE with that database, its output kept in OBJ.tidy
    and reused while the object (rebuilt by make when the file or a header it includes changes) and
    its configuration stay the same;
  - judges each finding against tools/analyze/suppressions (the false positives and accepted
    findings, each with its reason) and prints the ones not explained there.
Every finding, explained or not, goes to DIR/findings.txt. Exits 1 when a finding is unexplained or a
suppression matches nothing any more (a fixed finding's entry must go with it), 2 when a tool fails.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPRESSIONS = os.path.join(HERE, "suppressions")

# clang-tidy: the path-sensitive analyzer and the bug-prone patterns, without the checks that are about
# style rather than bugs (tools/analyze/README.md says why each is off)
CHECKS = ",".join([
    "-*",
    "clang-analyzer-*",
    "bugprone-*",
    # two adjacent parameters of one type: most functions of a C code base (size_t n, size_t off)
    "-bugprone-easily-swappable-parameters",
    # every int/size_t/double mix; -Wall -Wextra already sees the ones that change a sign
    "-bugprone-narrowing-conversions",
    # every int product that meets a size_t or a long (an index 2 * i, a timeval's (ms % 1000) * 1000):
    # the 25 hits of the first sweep were all bounded far below INT_MAX
    "-bugprone-implicit-widening-of-multiplication-result",
    # memcpy/memset/snprintf "unsafe" for want of C11 Annex K's _s functions, which glibc has not
    "-clang-analyzer-security.insecureAPI.DeprecatedOrUnsafeBufferHandling",
])
# `if (strcmp(a, b))` for "differ" is C's idiom; the check still flags comparisons with 1 or -1 and
# results used in arithmetic
TIDY_CONFIG = json.dumps({"Checks": CHECKS, "CheckOptions": [
    {"key": "bugprone-suspicious-string-compare.WarnOnImplicitComparison", "value": "false"}]})
HEADERS = r"(^|/)(common|model|worker|shard-server|coordinator)/.*\.h$"
CPPCHECK_ENABLE = "warning,performance,portability"

GCC_RE = re.compile(r"^([^:\s][^:]*):(\d+):(\d+): (warning|error): (.*) \[(-W[^\]]+)\]$")
CC1_RE = re.compile(r"^cc1: warning: (.*) \[(-W[^\]]+)\]$")
PATH_AT_RE = re.compile(r"^\s*\|([^:\s|][^:]*):(\d+):(\d+):$")
TIDY_RE = re.compile(r"^([^:\s][^:]*):(\d+):(\d+): (warning|error): (.*) \[([\w.,-]+)\]$")
CPPCHECK_RE = re.compile(r"^([^:\s][^:]*):(\d+):(\d+): (\w+): (.*) \[(\w+)\]$")


def rel(path):
    path = os.path.normpath(path)
    return os.path.relpath(path) if os.path.isabs(path) else path


def source_line(path, line):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for i, text in enumerate(f, 1):
                if i == line:
                    return text.strip()
    except OSError:
        pass
    return ""


def parse(regex, tool, text):
    found = []
    for ln in text.splitlines():
        m = regex.match(ln)
        if m:
            found.append((tool, m.group(6), rel(m.group(1)), int(m.group(2)), m.group(5)))
    return found


def gcc_findings(outdir, sources):
    found = []
    for src in sources:
        log = os.path.join(outdir, src[:-2] + ".o.analyzer")
        if not os.path.exists(log):
            sys.exit(f"analyze: {log} missing: run `make analyze` (it builds {outdir} first)")
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        found += parse(GCC_RE, "gcc", text)
        # a warning on code the compiler made (OpenMP's outlined regions) has no place ("cc1: warning:"):
        # the first place its path names stands for it
        lines = text.splitlines()
        for i, ln in enumerate(lines):
            m = CC1_RE.match(ln)
            if m:
                at = next((p for p in map(PATH_AT_RE.match, lines[i + 1:]) if p), None)
                path, line = (rel(at.group(1)), int(at.group(2))) if at else (src, 0)
                found.append(("gcc", m.group(2), path, line, m.group(1)))
    return found


def compile_db(outdir, sources):
    db = []
    for src in sources:
        with open(os.path.join(outdir, src[:-2] + ".o.cmd")) as f:
            args = f.read().splitlines()
        # no dependency files from the analyzers (they would land beside make's own)
        keep, skip = [], False
        for a in args:
            if skip:
                skip = False
            elif a in ("-MF", "-MT", "-MQ"):
                skip = True
            elif a not in ("-MMD", "-MP", "-MD"):
                keep.append(a)
        db.append({"directory": os.getcwd(), "file": src, "arguments": keep})
    path = os.path.join(outdir, "compile_commands.json")
    with open(path, "w") as f:
        json.dump(db, f, indent=1)
    return path


def cppcheck_findings(outdir, db, jobs):
    cache = os.path.join(outdir, "cppcheck")
    os.makedirs(cache, exist_ok=True)
    # it reads no system header: the byte order the product's #error checks ask for, POSIX's and
    # jansson's functions and macros from its libraries
    cmd = ["cppcheck", f"--project={db}", f"--enable={CPPCHECK_ENABLE}", "--inline-suppr", "--quiet",
           f"-j{jobs}", f"--cppcheck-build-dir={cache}", "--std=c11", "--library=posix",
           f"--library={os.path.join(HERE, 'jansson.cfg')}", "-D__ORDER_LITTLE_ENDIAN__=1234",
           "-D__BYTE_ORDER__=1234",
           "--template={file}:{line}:{column}: {severity}: {message} [{id}]"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"analyze: cppcheck failed ({r.returncode}):\n{r.stderr}")
    return parse(CPPCHECK_RE, "cppcheck", r.stderr)


def tidy_one(outdir, src):
    cache = os.path.join(outdir, src[:-2] + ".o.tidy")
    obj = os.path.join(outdir, src[:-2] + ".o")
    key = hashlib.sha1((TIDY_CONFIG + HEADERS).encode()).hexdigest()
    if os.path.exists(cache) and os.path.getmtime(cache) >= os.path.getmtime(obj):
        with open(cache, encoding="utf-8", errors="replace") as f:
            head, _, body = f.read().partition("\n")
        if head == key:
            return body
    r = subprocess.run(["clang-tidy", "-p", outdir, "--quiet", f"--config={TIDY_CONFIG}",
                        f"--header-filter={HEADERS}", src], capture_output=True, text=True)
    # a file clang cannot compile gives clang-diagnostic-error findings (unexplained); no finding at all
    # and a failure is the tool's
    if r.returncode != 0 and not parse(TIDY_RE, "clang-tidy", r.stdout):
        sys.exit(f"analyze: clang-tidy failed on {src}:\n{r.stdout}{r.stderr}")
    with open(cache, "w") as f:
        f.write(key + "\n" + r.stdout)
    return r.stdout


def tidy_findings(outdir, sources, jobs):
    found = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for out in pool.map(lambda s: tidy_one(outdir, s), sources):
            found += parse(TIDY_RE, "clang-tidy", out)
    return found


def load_suppressions():
    """Lines `TOOL CHECK FILE TEXT`: a finding of TOOL's CHECK in FILE on a line that contains TEXT
    (the flagged source line, so an entry survives lines moving); '#' lines give the reason."""
    rules = []
    with open(SUPPRESSIONS) as f:
        for n, ln in enumerate(f, 1):
            ln = ln.strip()
            if not ln or ln.startswith("#"):
                continue
            parts = ln.split(None, 3)
            if len(parts) != 4:
                sys.exit(f"{SUPPRESSIONS}:{n}: want TOOL CHECK FILE TEXT")
            rules.append({"at": n, "tool": parts[0], "check": parts[1], "file": parts[2], "text": parts[3],
                          "used": 0})
    return rules


def explained(rules, f):
    tool, check, path, line, _ = f
    text = source_line(path, line)
    for r in rules:
        if r["tool"] == tool and r["check"] == check and r["file"] == path and r["text"] in text:
            r["used"] += 1
            return True
    return False


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    outdir, sources = sys.argv[1], sorted(sys.argv[2:])
    jobs = int(os.environ.get("ANALYZE_JOBS", "2"))
    missing = [t for t in ("cppcheck", "clang-tidy") if shutil.which(t) is None]
    if missing:
        sys.exit(f"analyze: {' and '.join(missing)} not found (Debian: apt-get install cppcheck clang-tidy)")
    findings = gcc_findings(outdir, sources)
    db = compile_db(outdir, sources)
    findings += cppcheck_findings(outdir, db, jobs)
    findings += tidy_findings(outdir, sources, jobs)
    findings = sorted(set(findings), key=lambda f: (f[2], f[3], f[0], f[1]))
    rules = load_suppressions()
    open_ = []
    with open(os.path.join(outdir, "findings.txt"), "w") as out:
        for f in findings:
            ok = explained(rules, f)
            out.write(f"{'explained' if ok else 'OPEN'} {f[0]} {f[2]}:{f[3]}: {f[4]} [{f[1]}]\n")
            if not ok:
                open_.append(f)
    for f in open_:
        print(f"{f[2]}:{f[3]}: {f[0]}: {f[4]} [{f[1]}]")
    stale = [r for r in rules if not r["used"]]
    for r in stale:
        print(f"{SUPPRESSIONS}:{r['at']}: matches no finding any more: {r['tool']} {r['check']} {r['file']}")
    counts = {t: sum(1 for f in findings if f[0] == t) for t in ("gcc", "cppcheck", "clang-tidy")}
    print(f"analyze: {len(sources)} files; findings gcc -fanalyzer {counts['gcc']}, cppcheck {counts['cppcheck']}, "
          f"clang-tidy {counts['clang-tidy']}; {len(findings) - len(open_)} explained in "
          f"tools/analyze/suppressions, {len(open_)} unexplained (all: {outdir}/findings.txt)")
    sys.exit(1 if open_ or stale else 0)


if __name__ == "__main__":
    main()
