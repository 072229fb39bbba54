#!/bin/sh
# it_link_deps.sh: the control-plane binaries link no trainer. bin/coordinator and bin/shard-server
# run on machines without a GPU or a BLAS (a Redis host, a small VM): what they know about a model
# comes from model/ (layout, initialisation), never from worker/gpt or worker/cuda, so ldd must list
# no BLAS, no OpenMP runtime and no CUDA library for either.
# bin/worker links no CUDA library either: the GPT trainer opens bin/libdiloco_gpt_cuda.so only for
# --device cuda (worker/gpt/gpt_cuda_loader.c), so a CPU worker starts without mapping cuBLAS. With
# --device cuda and no loadable backend, the worker says which library and what to do.
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

ldd bin/worker > "$TMP/ldd-worker.txt" 2>&1 || fail "ldd bin/worker: $(cat "$TMP/ldd-worker.txt")"
bad=$(grep -Ei 'cublas|cudart|libcuda' "$TMP/ldd-worker.txt")
[ -z "$bad" ] || fail "bin/worker links CUDA libraries (every CPU worker would map them at start): $bad"
if [ -f bin/libdiloco_gpt_cuda.so ]; then
  ldd bin/libdiloco_gpt_cuda.so | grep -q cublas || fail "bin/libdiloco_gpt_cuda.so does not link cuBLAS"
  exported=$(nm -D --defined-only bin/libdiloco_gpt_cuda.so | awk '$2 == "T" { print $3 }' | grep -cv '^gpt_cuda_\|^dl_cuda_')
  [ "$exported" -eq 0 ] || fail "bin/libdiloco_gpt_cuda.so exports $exported functions outside gpt_cuda_*/dl_cuda_*"
  start_redis
  init_run cu --trainer gpt --layers 1 --heads 2 --dim 16 --ctx 16 --vocab 32 --shards 1 --workers 1 --seed 3
  DILOCO_CUDA_BACKEND=/nonexistent/libdiloco_gpt_cuda.so bin/worker --redis "$URL" --run cu --worker-id w1 \
    --device cuda --steps 1 > "$TMP/nocuda.txt" 2>&1 && fail "--device cuda with no loadable backend succeeded"
  grep -q 'cannot load the CUDA backend (set DILOCO_CUDA_BACKEND.*/nonexistent/libdiloco_gpt_cuda.so' "$TMP/nocuda.txt" ||
    fail "--device cuda with no loadable backend: $(tail -n 3 "$TMP/nocuda.txt")"
  say "bin/worker: no CUDA library linked; the backend bin/libdiloco_gpt_cuda.so is opened for --device cuda"
else
  say "bin/worker: no CUDA library linked (a CPU-only build: no backend library)"
fi
