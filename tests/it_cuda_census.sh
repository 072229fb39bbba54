#!/bin/sh
# it_cuda_census.sh: no kernel of a GPT-2 small training step (forward, backward, clipping, AdamW) leaves
# most of a GPU idle for lack of blocks. build/bench/cuda_census_emu counts one step's launches at real
# sizes under the CPU CUDA emulator's census mode (nothing runs: under a second) and marks (*) the
# kernel shapes with fewer than 2 blocks per SM of an H100/H200's 132. The marked kernels must be ones
# whose work is small whatever the grid (allowed below, each with why); any other kernel marked fails:
# the column sums were such a kernel (24 blocks for 768 columns, each walking all 8192 rows, on a
# pass of ~5 GB a step), found by reading, before this check existed. Every precision and attention is
# counted. Skipped (77) in a build without nvcc (the census is built with the CUDA backend).
cd "$(dirname "$0")/.." || exit 1
CENSUS=build/bench/cuda_census_emu
[ -x "$CENSUS" ] || { echo "no $CENSUS (built only with nvcc): skipped"; exit 77; }
# allowed few blocks, because their work is small:
#   sum_partial_k   the 256-block first stage of the deterministic double sums (loss, gradient norm)
#   sum_final_k     their one-block second stage (256 values)
#   colsum_final_k  adds the column sums' 32 chunks: 32 x columns floats
#   adamw_k         the launches over runs of small tensors (biases, LayerNorm weights: 768-3072 floats)
ALLOWED='sum_partial_k|sum_final_k|colsum_final_k|adamw_k'
fail=0
for args in "--precision bf16 --attention flash" "--precision bf16 --attention fused" \
            "--precision bf16 --attention gemm" "--precision fp32"; do
  # shellcheck disable=SC2086
  out=$("$CENSUS" $args 2>&1) || { echo "$out"; echo "FAIL: the census ($args) did not run"; exit 1; }
  launches=$(echo "$out" | sed -n 's/^kernels: \([0-9]*\) launches.*/\1/p')
  products=$(echo "$out" | sed -n 's/^products: \([0-9]*\)$/\1/p')
  [ "${launches:-0}" -gt 100 ] && [ "${products:-0}" -gt 100 ] ||
    { echo "$out"; echo "FAIL: $args: a step of 12 layers counted $launches launches and $products products"; exit 1; }
  bad=$(echo "$out" | grep '^ \*' | grep -Ev " ($ALLOWED) grid")
  if [ -n "$bad" ]; then
    echo "$bad"; echo "FAIL: $args: kernels above give a 132-SM GPU fewer than 2 blocks per SM"; fail=1
  else
    echo "$args: $launches launches, $products products; few blocks only where the work is small ($(echo "$out" | grep -c '^ \*') shapes)"
  fi
done
[ $fail = 0 ] || exit 1
echo "PASS: no large kernel of a GPT-2 small step is launched with fewer than 264 blocks"
