#!/bin/sh
# One phase of `make test` (or any target), timed: a line when it starts, a line with its duration when it
# ends, and the duration appended to LOG; `--last` also prints every phase of LOG and their total, whether
# or not the command succeeded, then removes LOG. The command's exit status is this script's.
#
#   scripts/phase.sh LOG NAME COMMAND...          # e.g. scripts/phase.sh /tmp/p.log install make install-dev
#   scripts/phase.sh --last LOG NAME COMMAND...
last=0
if [ "$1" = "--last" ]; then last=1; shift; fi
log=$1; name=$2; shift 2
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
start=$(now)
echo "==> [$name] started $(date -u +%H:%M:%S) UTC"
"$@"
status=$?
took=$(elapsed "$start" "$(now)")
if [ $status -eq 0 ]; then
  echo "<== [$name] done in ${took} s"
else
  echo "<== [$name] FAILED (exit $status) after ${took} s"
fi
printf '%s\t%s\t%s\n' "$name" "$took" "$status" >> "$log"
if [ $last -eq 1 ]; then
  echo "phases:"
  awk -F '\t' '{ printf "  %-18s %8.1f s%s\n", $1, $2, ($3 == 0 ? "" : "  (failed)"); total += $2 }
               END { printf "  %-18s %8.1f s\n", "total", total }' "$log"
  rm -f "$log"
fi
exit $status
