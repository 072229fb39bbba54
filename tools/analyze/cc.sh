#!/bin/sh
# cc.sh COMPILER ARGS...: the compiler `make analyze` builds the product's objects with (into
# build/analyze/). It compiles as COMPILER ARGS would, with -fanalyzer added (GCC's static analyzer),
# keeps that compiler's diagnostics in OBJECT.analyzer (tools/analyze/analyze.py reads them there: the
# make's output interleaves two jobs' diagnostics) and the command line in OBJECT.cmd, one argument a
# line, for the compile_commands.json cppcheck and clang-tidy read. Analyzer warnings are not errors
# here: the make goes on, and analyze.py judges them against tools/analyze/suppressions.
cc=$1
shift
out=
prev=
for a in "$@"; do
  [ "$prev" = -o ] && out=$a
  prev=$a
done
[ -n "$out" ] || exec "$cc" "$@"
printf '%s\n' "$cc" "$@" > "$out.cmd"
"$cc" "$@" -fanalyzer -Wno-error -fdiagnostics-color=never 2> "$out.analyzer"
rc=$?
[ $rc -eq 0 ] || cat "$out.analyzer" >&2 # a file that does not compile; else analyze.py reports
exit $rc
