#!/bin/sh
# The build's memory budget at full size (opt-in; heavy): builds an index from a
# float32 corpus larger than the budget with `--memory BUDGET` and reports the peak
# resident set size the kernel measured for the build process (getrusage
# ru_maxrss), the input size and the time. tests/resource_limits.sh runs the same
# check scaled down (64 MiB budget, ~140 MB input) in every `make check`.
#   bench/rss_budget.sh [BUILDDIR]
# Environment: RSS_BUDGET (2G), RSS_DOCS (120000 documents of 32 vectors x 256 dims:
# 3.9 GB), RSS_CENTROIDS (default: tartan's own choice), RSS_THREADS (2), RSS_DIR
# (work directory, default /tmp/tartan-rss; needs ~5 GB; the corpus is reused).
# Exit 0 when the peak RSS is below the budget plus RSS_ALLOWANCE_MB (default 64:
# program, libraries, BLAS buffers). Results: doc/benchmarks.md.
set -eu
B=$(cd "${1:-.}" && pwd)
budget=${RSS_BUDGET:-2G}
docs=${RSS_DOCS:-120000}
threads=${RSS_THREADS:-2}
allow=${RSS_ALLOWANCE_MB:-64}
W=${RSS_DIR:-/tmp/tartan-rss}
mkdir -p "$W"
C="$W/c$docs"
if [ ! -f "$C.vectors.npy" ]; then
    echo "rss_budget: writing a corpus of $docs documents x 32 vectors x 256 dims to $W"
    "$B/tartan-synth" --out "$C" --docs "$docs" --doclen 32 --dim 256 --queries 10 --qlen 8 \
        --seed 23 >/dev/null
fi
in_bytes=$(wc -c <"$C.vectors.npy")
case $budget in
    *G | *g) budget_mb=$(( ${budget%?} * 1024 )) ;;
    *M | *m) budget_mb=${budget%?} ;;
    *) echo "rss_budget: RSS_BUDGET must end in M or G" >&2; exit 2 ;;
esac
extra=""
[ -n "${RSS_CENTROIDS:-}" ] && extra="--centroids $RSS_CENTROIDS"
rm -rf "$C.idx"
echo "rss_budget: input $((in_bytes / 1048576)) MiB, --memory $budget, $threads threads"
# shellcheck disable=SC2086
python3 -c '
import resource, subprocess, sys, time
t = time.time()
rc = subprocess.call(sys.argv[1:])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print("peak_rss_mib %d wall_s %.1f user_s %.1f rc %d" % (ru.ru_maxrss // 1024, time.time() - t, ru.ru_utime, rc))
' "$B/tartan" build --vectors "$C.vectors.npy" --doclens "$C.doclens.npy" --out "$C.idx" \
    --memory "$budget" --threads "$threads" $extra | tee "$W/rss.log"
peak=$(sed -n 's/^peak_rss_mib \([0-9]*\).*/\1/p' "$W/rss.log")
rc=$(sed -n 's/.* rc \([0-9-]*\)$/\1/p' "$W/rss.log")
"$B/tartan" verify "$C.idx" >/dev/null
if [ "$rc" = 0 ] && [ "$peak" -lt $((budget_mb + allow)) ]; then
    echo "rss_budget: PASS: peak RSS $peak MiB < $budget_mb + $allow MiB for $((in_bytes / 1048576)) MiB of input"
else
    echo "rss_budget: FAIL: exit $rc, peak RSS $peak MiB (budget $budget_mb + $allow MiB)"
    exit 1
fi
