#!/bin/sh
# Build benchmark: tartan build against FAISS IVF train + add (Debian python3-faiss),
# same vectors, same number of centroids, same training sample size and iterations,
# same threads, measured in the same run. Reports wall time and peak RSS.
#
# usage: bench/bench_build.sh BUILDDIR WORKDIR DOCS DOCLEN DIM [MEMORY]
#   e.g. CENTROIDS=8192 bench/bench_build.sh build /var/tmp/tb 160000 32 128 2G  (5.12M x 128-d)
#        CENTROIDS=4096 bench/bench_build.sh build /var/tmp/tb 31250 16 3584 2G  (500k x 3584-d)
# CENTROIDS (default: tartan's default K) and THREADS (default 2) are environment knobs.
set -eu
B=$(cd "$1" && pwd); W=$2; DOCS=$3; DOCLEN=$4; DIM=$5; MEM=${6:-2G}
THREADS=${THREADS:-2}
mkdir -p "$W"
here=$(cd "$(dirname "$0")" && pwd)
TT_EXTRA_PKGS="python3-faiss time bc" "$here/../tools/setup-debian.sh"
P="$W/c${DOCS}x${DOCLEN}x${DIM}"
if [ ! -f "$P.done" ]; then # regenerate unless a previous run finished writing it
    "$B/tartan-synth" --out "$P" --docs "$DOCS" --doclen "$DOCLEN" --dim "$DIM" --queries 100 \
        --qlen 4 --f16 --seed 3
    touch "$P.done"
fi
rm -rf "$W/index"
/usr/bin/time -f "%e %M" -o "$W/tartan.time" "$B/tartan" build --vectors "$P.vectors.npy" \
    --doclens "$P.doclens.npy" --out "$W/index" --threads "$THREADS" --memory "$MEM" \
    ${CENTROIDS:+--centroids "$CENTROIDS"} >"$W/tartan.out"
cat "$W/tartan.out"
"$B/tartan" info --json "$W/index" >"$W/info.json"
read -r tsec trss <"$W/tartan.time"
K=$(/usr/bin/python3 -c "import json;print(json.load(open('$W/info.json'))['num_centroids'])")
NTRAIN=$(/usr/bin/python3 -c "import json;print(json.load(open('$W/info.json'))['build']['train_vectors'])")
ITERS=$(/usr/bin/python3 -c "import json;print(json.load(open('$W/info.json'))['build']['kmeans_iters'])")
RATIO=$(/usr/bin/python3 -c "import json;print('%.2f'%json.load(open('$W/info.json'))['ratio_f16'])")
/usr/bin/time -f "%e %M" -o "$W/faiss.time" /usr/bin/python3 "$here/faiss_ivf_build.py" \
    "$P.vectors.npy" "$K" "$NTRAIN" "$ITERS" "$THREADS" >"$W/faiss.out"
cat "$W/faiss.out"
read -r fsec frss <"$W/faiss.time"
N=$(/usr/bin/python3 -c "import json;print(json.load(open('$W/info.json'))['num_vectors'])")
printf '| %s x %s-d | %s | %s | %.1f s | %.0f MiB | %.1f s | %.0f MiB | %.2fx | %sx |\n' \
    "$N" "$DIM" "$K" "$NTRAIN" "$tsec" "$(echo "$trss / 1024" | bc -l)" "$fsec" \
    "$(echo "$frss / 1024" | bc -l)" "$(echo "$fsec / $tsec" | bc -l)" "$RATIO"
