#!/bin/sh
# it_layers.sh: libdiloco's and the shard-server's files call downward only, as the ```layers blocks of
# docs/architecture.md list them (tools/layers.py reads `nm` of build/worker/diloco/*.o and
# build/shard-server/**/*.o): no call to a file above, or to one the caller's line does not name, and
# every global name with its own file's prefix.
#
# Then the check itself is shown to fail, on the same objects, for each rule: a copy of the document
# that leaves out an edge the code has (delta.c → device.c), one whose list allows a circle
# (control.c → session.c), one that gives owners.c another prefix, one without heartbeat.c's line;
# for the shard-server, one without the edge commit_ahead.c → delta.c, one that lists commit_log.c
# below commit_compute.c, without that edge (its call down to cq_fill_g is then a call up), and one
# without link/set.c → link/state.c (the bookkeeping the transports report to, below them); for common/'s
# folders, one whose format/ may not call math/ (the calls and the includes are both found), one whose
# base/ may call redis/ (a circle), and one that lets only net/ use hiredis.
. "$(dirname "$0")/lib.sh"
ls build/worker/diloco/*.o build/shard-server/*.o > /dev/null 2>&1 || fail "build first: make all"

python3 tools/layers.py --doc docs/architecture.md common worker/diloco shard-server > "$TMP/ok.log" 2>&1 \
  || fail "$(cat "$TMP/ok.log")"
say "$(cat "$TMP/ok.log")"

# expect_fail NAME SED-SCRIPT PATTERN [DIR]: the document edited by SED-SCRIPT fails with a line matching
# PATTERN (checking DIR's block, worker/diloco by default)
expect_fail() {
  sed "$2" docs/architecture.md > "$TMP/$1.md"
  cmp -s docs/architecture.md "$TMP/$1.md" && fail "$1: the edit '$2' changed nothing (the layers block moved?)"
  if python3 tools/layers.py --doc "$TMP/$1.md" "${4:-worker/diloco}" > "$TMP/$1.log" 2>&1; then
    fail "$1: the check passed a document that should fail ($2)"
  fi
  grep -q "$3" "$TMP/$1.log" || fail "$1: no line matching '$3' in: $(cat "$TMP/$1.log")"
  say "$1: $(grep "$3" "$TMP/$1.log" | head -n 1)"
}

expect_fail unlisted_call 's/^\(delta\.c  *dl_delta_  *→.*\) device\.c$/\1/' 'delta.c calls dl_dev_[a-z_]* (device.c, not in its line)'
expect_fail circle 's/^\(control\.c  *dl_  *→\)$/\1 session.c/' 'control.c may call session.c, which is not below it'
expect_fail wrong_prefix 's/^owners\.c      owners_ /owners.c      own_    /' 'owners.c defines owners_[a-z_]*, which starts with no prefix'
expect_fail missing_file '/^heartbeat\.c /d' 'heartbeat.c was built but has no line'
expect_fail ss_unlisted_call 's/^\(commit_ahead\.c  *ahead_  *→.*\) delta\.c$/\1/' 'commit_ahead.c calls delta_find (delta.c, not in its line)' shard-server
expect_fail ss_upward '/^commit_log\.c /{s/ commit_compute\.c//;h;d};/^commit_compute\.c /G' 'commit_log.c calls cq_fill_g (commit_compute.c, above it)' shard-server
expect_fail ss_link_unlisted 's/^\(link\/set\.c  *rl_set_ rlink_set  *→\) link\/state\.c/\1/' 'link/set.c calls rl_state_[a-z_]* (link/state.c, not in its line)' shard-server
expect_fail common_call 's|^\(format/  *→\) math/ base/|\1 base/|' 'format/blob.c calls codec_[a-z_]* (common/math/codec.c, math/ not in its line)' common
grep -q 'format/[a-z_]*\.[ch] includes math/[a-z_]*\.h (math/ is not in the line of format/)' "$TMP/common_call.log" \
  || fail "common_call: the include of math/ by format/ was not found: $(cat "$TMP/common_call.log")"
expect_fail common_circle 's|^\(base/  *→\)|\1 redis/|' 'base/ may call redis/, which is not below it in the list (a circle)' common
expect_fail common_hiredis 's|^\(extern hiredis [^ ]* →\) redis/|\1 net/|' 'common/redis/[a-z_]*\.[ch] includes <hiredis/hiredis.h>, which only net/ may' common
say "the layers of common, worker/diloco and shard-server hold, and the check fails on each kind of violation"
