#!/bin/sh
# tools/gpu_pack.sh: packs what a lent GPU machine needs for our GPU checks (tools/gpu_check.sh) into
# .gpu/pack.tar.xz (git-ignored), about 10 MB.
#
# That machine (the device tool's, docs/cuda.md "Measuring on a lent GPU") has the CUDA toolkit and a
# python3 with a CUDA torch, but none of our Debian packages (hiredis, libevent, msgpack-c, xxhash,
# jansson, cmocka, OpenBLAS, redis-server) and no package registry, so nothing can be built there. The pack
# holds what `make all tests-build python bench` built here: bin/, the CUDA test programs, build/libdiloco*.so,
# build/kjv.tok; redis-server and redis-cli; and every shared library those load except glibc's, the C++
# runtime's and the CUDA toolkit's (gpu_check.sh drops the ones the machine has itself).
#
#   sh tools/gpu_pack.sh            then the device tool's run: carry [".gpu"], command "sh tools/gpu_check.sh"
set -eu
cd "$(dirname "$0")/.."
echo "building (make all tests-build python bench)"
make all tests-build python bench > build/gpu-pack-make.log 2>&1 || { tail -20 build/gpu-pack-make.log; exit 1; }
[ -f build/libdiloco_cuda.so ] && [ -f bin/libdiloco_gpt_cuda.so ] ||
  { echo "gpu_pack: no CUDA build (nvcc not found?): build/libdiloco_cuda.so or bin/libdiloco_gpt_cuda.so is missing"; exit 1; }
if [ ! -s build/kjv.tok ]; then # as bench/compression_quality makes it
  bible 'Gen1:1-Rev22:21' > build/kjv.txt && bin/worker prepare-data --input build/kjv.txt --output build/kjv.tok > /dev/null
fi
STAGE=$(mktemp -d /tmp/gpupack.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/build/tests/tools" "$STAGE/lib" "$STAGE/tools"
cp bin/* "$STAGE/bin/"
for t in build/tests/test_cuda_* build/tests/tools/*; do # the CUDA tests, and the references the tests replay
  case $t in # not the CPU emulator's runs of the same tests (minutes of CPU there, and CI runs them)
    *.d|*_emu) ;;
    *) cp "$t" "$STAGE/${t%/*}/" ;;
  esac
done
cp build/libdiloco.so build/libdiloco_cuda.so build/kjv.tok "$STAGE/build/"
cp "$(command -v redis-server)" "$(command -v redis-cli)" "$STAGE/tools/"
# the libraries they load, but not glibc's, the C++ runtime's or CUDA's (the machine has its own, newer)
for f in "$STAGE"/bin/* "$STAGE"/build/tests/* "$STAGE"/build/*.so "$STAGE"/tools/*; do
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcu*|libnv*) ;;
    *) cp -L "$lib" "$STAGE/lib/" ;;
  esac
done
mkdir -p .gpu
tar -cJf .gpu/pack.tar.xz -C "$STAGE" .
echo "packed .gpu/pack.tar.xz ($(du -h .gpu/pack.tar.xz | cut -f1)): $(ls "$STAGE/lib" | tr '\n' ' ')"
