#!/bin/sh
# it_link_deps.sh: the control-plane binaries link no trainer. bin/coordinator and bin/shard-server
# run on machines without a GPU or a BLAS (a Redis host, a small VM): what they know about a model
# comes from model/ (layout, initialisation), never from worker/gpt or worker/cuda, so ldd must list
# no BLAS, no OpenMP runtime and no CUDA library for either.
. "$(dirname "$0")/lib.sh"
forbidden='blas|lapack|gomp|libomp|iomp|cublas|cudart|libcuda'
for b in coordinator shard-server; do
  [ -x "bin/$b" ] || fail "bin/$b is missing: run make first"
  ldd "bin/$b" > "$TMP/ldd-$b.txt" 2>&1 || fail "ldd bin/$b: $(cat "$TMP/ldd-$b.txt")"
  grep -q 'libc\.so' "$TMP/ldd-$b.txt" || fail "ldd bin/$b lists no libc: $(cat "$TMP/ldd-$b.txt")"
  bad=$(grep -Ei "$forbidden" "$TMP/ldd-$b.txt")
  [ -z "$bad" ] || fail "bin/$b links a trainer's libraries: $bad"
  say "bin/$b: $(wc -l < "$TMP/ldd-$b.txt") shared libraries, none of BLAS, OpenMP or CUDA"
done
