#!/bin/sh
# it_python_group_fsdp.sh: process groups do not support sharded models yet (docs/PROTOCOL.md, "Process
# groups", FSDP: designed, not built). rediloco.DiLoCo(..., process_group=...) refuses an FSDP or fully_shard
# model with NotImplementedError saying so, before it loads libdiloco or touches Redis (tests/python/
# group_fsdp_refusal.py: stand-in classes with the names of torch's, as Debian's torch 1.13 cannot import
# FSDP on Python 3.11; where it can, the real class's name is checked to be among those refused), while the
# same call with a replicated model passes that check.
. "$(dirname "$0")/lib.sh"
dead="redis://127.0.0.1:$(free_port)"
/usr/bin/python3 tests/python/group_fsdp_refusal.py "$dead" > "$TMP/fsdp.log" 2>&1 \
  || fail "group_fsdp_refusal.py: $(tail -n 20 "$TMP/fsdp.log")"
cut -c1-200 "$TMP/fsdp.log"
[ "$(grep -c '^ok' "$TMP/fsdp.log")" -eq 4 ] || fail "expected 4 ok lines: $(cat "$TMP/fsdp.log")"
say "a sharded model in a process group is refused with NotImplementedError"
