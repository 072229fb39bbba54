#!/bin/sh
# it_lib_symbols.sh: the library exports exactly the API of worker/diloco.h and nothing else, so none
# of its internal names (log_init, now_ms, conn_get, ... of common/ and worker/diloco/) can clash with
# a host program's:
#   - the dynamic symbols build/libdiloco.so defines are the functions diloco.h declares (DILOCO_API);
#   - the global symbols build/libdiloco.a defines are the same;
#   - its soname is libdiloco.so.<DILOCO_ABI_VERSION>, and Python's ctypes loads it and reads the
#     version and struct sizes (what the Python package checks first).
. "$(dirname "$0")/lib.sh"
[ -f build/libdiloco.so ] && [ -f build/libdiloco.a ] || fail "build first: make lib"

sed -n 's/^DILOCO_API[^(]*[ *]\(diloco_[a-z0-9_]*\)(.*/\1/p' worker/diloco.h | sort > "$TMP/api.txt"
[ "$(wc -l < "$TMP/api.txt")" -eq "$(grep -c '^DILOCO_API' worker/diloco.h)" ] \
  || fail "a DILOCO_API line of diloco.h does not read as one declaration"
[ "$(wc -l < "$TMP/api.txt")" -ge 20 ] || fail "only $(wc -l < "$TMP/api.txt") functions found in diloco.h"

nm -D --defined-only build/libdiloco.so | awk '{print $NF}' | sort > "$TMP/so.txt"
diff "$TMP/api.txt" "$TMP/so.txt" > "$TMP/so.diff" || fail "libdiloco.so exports other names than diloco.h declares
(< only in diloco.h, > only in the library):
$(head -n 40 "$TMP/so.diff")"

nm -g --defined-only build/libdiloco.a | awk 'NF == 3 {print $3}' | sort > "$TMP/a.txt"
diff "$TMP/api.txt" "$TMP/a.txt" > "$TMP/a.diff" || fail "libdiloco.a defines other global names than diloco.h declares:
$(head -n 40 "$TMP/a.diff")"

abi=$(sed -n 's/^#define DILOCO_ABI_VERSION \([0-9]*\).*/\1/p' worker/diloco.h)
version=$(sed -n 's/^#define DILOCO_VERSION_STRING "\(.*\)"/\1/p' worker/diloco.h)
readelf -d build/libdiloco.so | grep -q "SONAME.*\[libdiloco\.so\.$abi\]" \
  || fail "soname: $(readelf -d build/libdiloco.so | grep SONAME), want libdiloco.so.$abi"

got=$($PYTHON - <<EOF
import ctypes
lib = ctypes.CDLL("build/libdiloco.so")
lib.diloco_version_string.restype = ctypes.c_char_p
lib.diloco_options_size.restype = ctypes.c_size_t
print(lib.diloco_version_string().decode(), lib.diloco_abi_version(), lib.diloco_options_size() > 0)
EOF
) || fail "ctypes could not load build/libdiloco.so"
[ "$got" = "$version $abi True" ] || fail "ctypes reads '$got', want '$version $abi True'"
say "libdiloco.so and libdiloco.a export the $(wc -l < "$TMP/api.txt") functions of diloco.h and nothing else (version $version, ABI $abi)"
