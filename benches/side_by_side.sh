#!/bin/bash
# Runs two builds of the compare benchmark at the same moment, one pinned to each of two cores,
# the cores swapped every pair, and prints each run's JSON lines tagged with its build, core and
# pair. Both runs get whatever the host does to the caches and memory meanwhile, which interleaving
# in time does not give on a shared machine (BENCHMARKS.md, "Side by side, at the same moment").
#
#   benches/side_by_side.sh OLD_BINARY NEW_BINARY PAIRS [compare's arguments...] > ab.jsonl
#
# e.g. OLD_BINARY built from another worktree with `cargo bench --bench compare --no-run`, and
# `tokio-timewheel-service w12 1000000` as the arguments (the default). Needs two cores.
set -euo pipefail
old=$1 new=$2 pairs=$3
shift 3
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(tokio-timewheel-service w12 1000000)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
one() { # build binary core pair
  taskset -c "$3" "$2" "${args[@]}" 2>/dev/null | sed "s/^{/{\"build\":\"$1\",\"cpu\":$3,\"pair\":$4,/" > "$tmp/$1"
}
for i in $(seq 1 "$pairs"); do
  a=$((i % 2))
  one old "$old" "$a" "$i" & one new "$new" $((1 - a)) "$i" & wait
  cat "$tmp/old" "$tmp/new"
  echo "pair $i of $pairs" >&2
done
