# deploy/local/demo_lib.sh: what the two demos (demo.sh, demo_torch.sh) share, sourced after they cd to the
# repository root and set DIR (the demo's state folder) and DATA (the corpus folder): a clean start of
# deploy/local/cluster.sh in DIR, stopping every process on exit or Ctrl-C, and the corpus.
CL="sh deploy/local/cluster.sh"
PIDS=""

# Stop what an interrupted demo left in DIR and start empty.
demo_reset() {
  $CL down --dir "$DIR" >/dev/null 2>&1
  rm -rf "$DIR/redis" "$DIR/logs" "$DIR/pids" "$DIR"/*.jsonl "$DIR"/*.log "$DIR"/*.pid "$DIR/cluster.env"
  mkdir -p "$DIR/logs" "$DATA"
}

demo_cleanup() {
  for p in $PIDS; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
  $CL down --dir "$DIR" >/dev/null 2>&1
}

# The King James Bible (Debian bible-kjv) as byte-level tokens in DATA/kjv.tok, made once.
demo_corpus() {
  [ -s "$DATA/kjv.tok" ] && return 0
  echo "== preparing the corpus: the King James Bible (Debian bible-kjv), byte-level tokens"
  bible 'Gen1:1-Rev22:21' > "$DATA/kjv.txt.tmp" && mv "$DATA/kjv.txt.tmp" "$DATA/kjv.txt" || { echo "bible failed"; return 1; }
  bin/worker prepare-data --input "$DATA/kjv.txt" --output "$DATA/kjv.tok"
}

# A demo takes no arguments (its knobs are environment variables): --help prints its header comment.
case "${1:-}" in
  "") ;;
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "deploy/local/$(basename "$0")"
             exit 0 ;;
  *) echo "$(basename "$0"): unknown argument '$1' (the knobs are DEMO_* environment variables: see --help)" >&2
     exit 2 ;;
esac
demo_reset
trap demo_cleanup EXIT
trap 'exit 130' INT TERM
