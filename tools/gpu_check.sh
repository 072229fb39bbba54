#!/bin/sh
# tools/gpu_check.sh: the GPU checks (issue 27) in one command on a lent GPU machine, from the repo root:
#
#   here:  sh tools/gpu_pack.sh
#   there: the device tool's run, carry [".gpu"], command "sh tools/gpu_check.sh", timeout_s 600
#
# It unpacks .gpu/pack.tar.xz (bin/, build/, redis-server, libraries: tools/gpu_pack.sh), keeps only the
# libraries the machine lacks, and runs with the machine's own python3 (a CUDA torch: PYTHON, tests/lib.sh)
# each step under its own time limit, the output of each in $OUT (7 files; the device tool returns 8 at most):
#   machine.txt      nvidia-smi, torch's version and CUDA, any library still not found
#   tests-cuda.txt   tests/run.sh cuda_, 4 at once (TEST_JOBS=4): test_cuda_*, it_cuda_* and it_python_cuda_so
#                    (kernels, steps, bf16, DiLoCo on the device, C and PyTorch process groups on the device
#                    hooks, a PyTorch sharded group's chunks on cuda, the Python package's CUDA library)
#   tests-python.txt the Python tests that meet the GPU or torch's version: it_python_exactness (fp32 and bf16
#                    with this torch), it_python_transfer_path, it_python_gpt_device (the example with
#                    --device cuda), it_python_group_fsdp (FSDP needs torch >= 2.4)
#   bench-bf16.txt   bin/bench-trainer_cuda --precision bf16 --profile: the issue's target command, with the
#                    default attention (auto: the tensor-core flash kernels at GPT-2 small's head size), GPT-2
#                    small against torch bf16, and where each configuration's step time goes
#   bench-attention.txt the same with --attention fused (one warp a row), then --attention gemm (the
#                    attention's products on tensor cores), both --no-torch --profile (torch's figure is
#                    bench-bf16's, same GPU, a minute before), then one line with the three attentions and
#                    torch side by side (GPT-2 small, tokens/s), also printed at the end
#   bench-more.txt   the bf16 bench with the bias in two passes (DILOCO_CUDA_LT=0) against cuBLASLt's epilogue
#                    (bench-bf16), with the logits' rows of the vocabulary (DILOCO_CUDA_VOCAB_PAD=0) against
#                    padded to 64 (bench-bf16), then bin/bench-trainer_cuda --tf32 --no-torch (torch's TF32
#                    figure is in issue 27): these go first when the loan runs short
#   test-logs.tar.gz every test's log
# The limits add up to 490 s (140 + 100 + 90 + 40 + 40 + 30 + 30 + 20), so that a run with its setup ends well
# inside one command's 600 s and a 15-minute loan leaves time for a second, shorter run. None of these
# limits has been tried on a GPU: the steps run in the order of what issue 27 needs (tests, then the
# target bench, then the comparisons), and a step cut by its limit says so in its file. Without a GPU the
# CUDA steps skip (77), so the script can be tried on the build machine: OUT=/tmp/gpu-out sh
# tools/gpu_check.sh (after gpu_pack.sh).
set -u
cd "$(dirname "$0")/.." || exit 1
O=${OUT:-/tmp/gpu-check}
mkdir -p "$O"
[ -f .gpu/pack.tar.xz ] || { echo "no .gpu/pack.tar.xz: run sh tools/gpu_pack.sh on the build machine, then carry .gpu"; exit 2; }
rm -rf .gpu/x && mkdir -p .gpu/x && tar -xJf .gpu/pack.tar.xz -C .gpu/x || exit 1
mkdir -p bin build && cp -a .gpu/x/bin/. bin/ && cp -a .gpu/x/build/. build/ || exit 1
for l in .gpu/x/lib/*; do # the machine's own copy wins: ours may be older than what its other libraries want
  ldconfig -p | grep -q "/$(basename "$l")\$" && rm -f "$l"
done
export LD_LIBRARY_PATH="$PWD/.gpu/x/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PWD/.gpu/x/tools:$PATH"
PYTHON=${PYTHON:-$(command -v python3)}; export PYTHON PYTHONUNBUFFERED=1 # the machine's own, with its CUDA torch
# cuBLAS not in /usr/local/cuda/lib64: an image may have it only in torch's Python packages (nvidia-cublas)
if ldd bin/libdiloco_gpt_cuda.so 2>/dev/null | grep -q 'libcublas.*not found'; then
  for d in $("$PYTHON" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for l in "$d"/nvidia/*/lib "$d"/nvidia/*/*/lib; do
      ls "$l"/libcublas* > /dev/null 2>&1 && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$l"
    done
  done
  echo "cuBLAS from torch's packages: $LD_LIBRARY_PATH"
fi

step() { # NAME LIMIT COMMAND...: its output to the screen, added to $O/NAME.txt, and alone in $O/.last
  name=$1; limit=$2; shift 2
  echo "== $name ($(date +%T), limit ${limit} s): $*" | tee -a "$O/$name.txt" | tee "$O/.last"
  { timeout -k 5 "$limit" "$@" 2>&1; rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then echo "== $name: cut at its limit of $limit s"; fi; } | tee -a "$O/$name.txt" "$O/.last"
}
gpt2_small() { # config (c)'s tokens/s in the last step's output (trainer step, device-only step, PyTorch), - where absent
  awk 'function tok(s, a, n) { if (s == "") return "-"; sub(/ tokens\/s.*/, "", s); n = split(s, a, " "); return a[n] }
       /^\(c\) / { c = 1 } c && /trainer step/ { t = $0 } c && /device-only step:/ { d = $0 } c && /PyTorch, same model/ { p = $0 }
       END { printf "trainer %s, device-only %s, PyTorch %s", tok(t), tok(d), tok(p) }' "$O/.last"
}
{
  nvidia-smi
  echo "python3: $PYTHON"
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU seen:", torch.cuda.is_available())'
  echo "libraries packed and used: $(ls .gpu/x/lib | tr '\n' ' ')"
  for b in bin/worker bin/shard-server bin/libdiloco_gpt_cuda.so build/libdiloco_cuda.so build/tests/test_cuda_step; do
    ldd "$b" | grep "not found" | sed "s|^|$b: |"
  done
} > "$O/machine.txt" 2>&1
cat "$O/machine.txt"
step tests-cuda 140 env TEST_JOBS=4 sh tests/run.sh cuda_
step tests-python 100 sh -c 'for t in it_python_exactness it_python_transfer_path it_python_gpt_device it_python_group_fsdp; do
  sh tests/run.sh "$t"; done'
step bench-bf16 90 bin/bench-trainer_cuda --precision bf16 --profile
auto="auto ($(grep -m1 '^(c) attention:' "$O/.last" | sed 's/^(c) attention: \([a-z]*\).*/\1/')): $(gpt2_small)"
step bench-attention 40 bin/bench-trainer_cuda --precision bf16 --attention fused --no-torch --profile
fused=$(gpt2_small)
step bench-attention 40 bin/bench-trainer_cuda --precision bf16 --attention gemm --no-torch --profile
echo "== bf16 GPT-2 small (c), tokens/s: $auto | fused: $fused | gemm: $(gpt2_small)" | tee -a "$O/bench-attention.txt"
# the bias in the products' epilogue (cuBLASLt, the default) against the two passes
step bench-more 30 env DILOCO_CUDA_LT=0 bin/bench-trainer_cuda --precision bf16 --no-torch
echo "== bf16 GPT-2 small (c), tokens/s, bias: epilogue ${auto#*: } | two passes (DILOCO_CUDA_LT=0) $(gpt2_small)" |
  tee -a "$O/bench-more.txt"
# the logits' rows padded to 64 (the default) against rows of the vocabulary
step bench-more 30 env DILOCO_CUDA_VOCAB_PAD=0 bin/bench-trainer_cuda --precision bf16 --no-torch
echo "== bf16 GPT-2 small (c), tokens/s, logits rows: padded ${auto#*: } | of the vocabulary (DILOCO_CUDA_VOCAB_PAD=0) $(gpt2_small)" |
  tee -a "$O/bench-more.txt"
step bench-more 20 bin/bench-trainer_cuda --tf32 --no-torch
rm -f "$O/.last"
tar -czf "$O/test-logs.tar.gz" build/test-logs 2>/dev/null
grep -h '^== bf16 GPT-2 small' "$O/bench-attention.txt" "$O/bench-more.txt" 2>/dev/null
echo "== done $(date +%T): $(grep -h -E '^[0-9]+ passed' "$O"/tests-*.txt | tr '\n' ' ')"
