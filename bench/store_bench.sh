#!/bin/bash
# Living-index benchmark (doc/benchmarks.md, "Living index: add, delete, compact"):
# every row of that section's tables comes from one run of this script.
#
#   add     add throughput against build throughput: a base index of 16k documents x
#           30 x 128-d (480k vectors), then the other 480k vectors of the same
#           collection added (one batch; ten batches) against a fresh build of them
#   search  PLAID k = 10 after the ten adds (11 segments), after tartan compact, and
#           on a fresh build of the same documents: p50, recall@10 against each
#           index's own exhaustive search, MRR@10 of the planted answers
#   delete  delete 1, 333 (1 % of 33k documents), 3333 (10 %) and 13333 ids from indexes
#           of 250k, 1M and 4M vectors: warm and cold page cache, and 333 more after 3333
#   drift   a base from one tartan-synth collection, 50 % more documents from another
#           (new topic centres) added; drift ratio, recall and MRR before and after
#           tartan compact --retrain, with and without --keep-originals f16, against a
#           fresh build over all documents; PLAID's threshold on the drifted index
#   memory  peak RSS of tartan add of 2M float32 vectors (1 GB) to the 4M-vector index
#           with --memory 512M and 128M, and of tartan compact (plain and --retrain) of
#           the 2-segment result (bench/rss_watch.py: anonymous and file-mapped peaks)
#
# usage: bench/store_bench.sh BUILDDIR WORKDIR [PART...]   (default: all five, in order)
# Environment: REPS (timed repetitions, median reported; default 3), DEL_REPS (the
# same for deletes; default 7), THREADS (build, add and compact threads; default 2). WORKDIR needs ~8 GB; collections are reused.
# The results go to stdout and WORKDIR/store_bench.txt; intermediate runs and logs stay
# in WORKDIR.
set -euo pipefail
B=$(cd "$1" && pwd); mkdir -p "$2"; W=$(cd "$2" && pwd); shift 2
PARTS=${*:-add search delete drift memory}
REPS=${REPS:-3}; THREADS=${THREADS:-2}
here=$(cd "$(dirname "$0")" && pwd); top=$(cd "$here/.." && pwd)
export OPENBLAS_NUM_THREADS=1
# The real binary, not libtool's wrapper script (which costs ~30 ms of shell per run,
# more than a small delete).
if [ -x "$B/.libs/tartan" ]; then
    T="$B/.libs/tartan"; export LD_LIBRARY_PATH="$B/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
    T="$B/tartan"
fi
SYN="$B/tartan-synth"
PY=/usr/bin/python3
OUT="$W/store_bench.txt"
cd "$W"

log() { echo "$*" | tee -a "$OUT"; }
# Runs a command, its output to $W/last.out; prints its wall time in microseconds.
timed() {
    local s e
    s=$(date +%s%N)
    if ! "$@" >"$W/last.out" 2>&1; then cat "$W/last.out" >&2; echo "failed: $*" >&2; exit 1; fi
    e=$(date +%s%N)
    cat "$W/last.out" >>"$W/commands.log"
    echo $(( (e - s) / 1000 ))
}
# The same through /usr/bin/time: wall and user CPU seconds ("W U"), for runs long
# enough that the other CPU's load shows in the wall time.
timedu() {
    if ! /usr/bin/time -f "%e %U" -o "$W/last.time" "$@" >"$W/last.out" 2>&1; then
        cat "$W/last.out" >&2; echo "failed: $*" >&2; exit 1
    fi
    cat "$W/last.out" >>"$W/commands.log"
    cat "$W/last.time"
}
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
minv() { printf '%s\n' "$@" | sort -g | head -n1; }
maxv() { printf '%s\n' "$@" | sort -g | tail -n1; }
calc() { awk "BEGIN {printf \"$1\", $2}"; }
jget() { $PY -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d=d[k]
print(d)' "$1" "$2"; }
info_json() { "$T" info --json "$1" >"$W/info.json"; jget "$W/info.json" "$2"; }
recall() { $PY "$here/search_recall.py" "$1" "$2" 10; }
mrr() { "$T" eval --qrels "$1" --run "$2" -m MRR@10 --json | $PY -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["MRR@10"])'; }
# Drops a directory's files from the page cache (written back first).
evict() { $PY -c 'import os,sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.fdatasync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$1"/*; }
synth() { # PREFIX args...: tartan-synth, once
    local p=$1; shift
    [ -f "$p.qrels.tsv" ] || "$SYN" --out "$p" "$@" 2>>"$W/commands.log"
}
slice() { [ -f "$4.ids.txt" ] || $PY "$here/npy_docs.py" "$@"; }
# search_bench, built as bench/search_bench.sh builds it
SB="$W/search_bench"
if [ ! -x "$SB" ] || [ "$top/bench/search_bench.c" -nt "$SB" ]; then
    gcc -O2 -std=c11 -D_GNU_SOURCE -include "$B/config.h" -I"$top/include" -I"$top/src" \
        $(pkg-config --cflags openblas 2>/dev/null) "$top/bench/search_bench.c" \
        "$B/.libs/libtartan-internal.a" -lopenblas -luring -lxxhash -lm -lpthread -o "$SB"
fi
sb() { "$SB" --score sum "$@" | tee -a "$W/search.jsonl"; }
jfield() { $PY -c 'import json,sys; d=json.loads(sys.stdin.readlines()[-1]); print("%.3f" % d[sys.argv[1]])' "$1"; }

log "== $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)," \
    "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "tartan $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?'), REPS=$REPS THREADS=$THREADS"

# ------------------------------------------------------------------ collection 1
# 32k documents x 30 x 128-d (960k vectors, float32), 1000 queries of 32 vectors whose
# targets are spread over all 32k: the first 16k documents are the base, the other 16k
# are added (one batch of 16k, or ten of 1600), in collection order.
coll1() {
    synth s1 --docs 32000 --doclen 30 --dim 128 --queries 1000 --qlen 32 --noise 0.3 \
        --qnoise 0.2 --seed 5
    slice s1 0 16000 s1base
    slice s1 16000 32000 s1new
    for i in 1 2 3 4 5 6 7 8 9 10; do
        slice s1 $((16000 + 1600 * (i - 1))) $((16000 + 1600 * i)) "s1b$i"
    done
}
build() { # OUT PREFIX[,PREFIX...] [options]: times tartan build over those collections
    local out=$1 v="" l="" p; shift
    : >"$W/$out.ids"
    for p in ${1//,/ }; do
        v="$v${v:+,}$p.vectors.npy"; l="$l${l:+,}$p.doclens.npy"; cat "$p.ids.txt" >>"$W/$out.ids"
    done
    shift
    rm -rf "$out"
    timed "$T" build --vectors "$v" --doclens "$l" --ids "$W/$out.ids" --out "$out" \
        --threads "$THREADS" "$@"
}
segs() { "$T" info --json "$1" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)["segments"]))'; }
add() { # INDEX PREFIX [options]
    local ix=$1 p=$2; shift 2
    timed "$T" add --index "$ix" --vectors "$p.vectors.npy" --doclens "$p.doclens.npy" \
        --ids "$p.ids.txt" --threads "$THREADS" "$@"
}
add10() { # INDEX: the ten batches, one add each; prints the total in microseconds
    local t=0 i
    for i in 1 2 3 4 5 6 7 8 9 10; do t=$(( t + $(add "$1" "s1b$i") )); done
    echo $t
}
encode_s() { sed -n 's/.*encode \([0-9.]*\) s.*/\1/p' "$W/last.out"; }

part_add() {
    coll1
    local r bb=() bn=() be=() a1=() a10=() t
    for r in $(seq "$REPS"); do
        bb+=("$(build s1base.idx s1base)")
        bn+=("$(build s1new.idx s1new)"); be+=("$(encode_s)")
        rm -rf s1add1.idx; cp -a s1base.idx s1add1.idx
        a1+=("$(add s1add1.idx s1new)")
        rm -rf s1add10.idx; cp -a s1base.idx s1add10.idx
        a10+=("$(add10 s1add10.idx)")
        log "add rep $r (us): build base ${bb[-1]}, build added docs ${bn[-1]} (encode ${be[-1]} s)," \
            "add 1 batch ${a1[-1]}, add 10 batches ${a10[-1]}"
    done
    local N=480000 mbn; mbn=$(med "${bn[@]}")
    log ""
    log "| operation (480,000 vectors x 128-d, float32 .npy) | time, median of $REPS | range | vectors/s | vs build of the same vectors |"
    log "|---|---:|---:|---:|---:|"
    row() { local m; m=$(med "$@")
        log "| $LABEL | $(calc '%.2f s' "$m/1e6") | $(calc '%.2f' "$(minv "$@")/1e6")-$(calc '%.2f s' "$(maxv "$@")/1e6") |" \
            "$(calc '%.0f' "$N/($m/1e6)") | $(calc '%.2fx' "$mbn/$m") |"; }
    LABEL="build of the base (16k documents, trains its codebook)" row "${bb[@]}"
    LABEL="build of the 16k documents that are added (trains its own)" row "${bn[@]}"
    LABEL="add of them to the base, one batch" row "${a1[@]}"
    LABEL="add of them to the base, ten batches of 1600 documents" row "${a10[@]}"
    log "(build's own encode phase for the added documents, median: $(med "${be[@]}") s)"
    "$T" info s1add10.idx | sed -n '/^segments/,/^drift/p' | tail -n 3 | tee -a "$OUT"
}

part_search() {
    coll1
    [ -f s1add10.idx/MANIFEST ] || { build s1base.idx s1base >/dev/null; cp -a s1base.idx s1add10.idx; add10 s1add10.idx >/dev/null; }
    rm -rf s1cmp.idx; cp -a s1add10.idx s1cmp.idx
    local tc tf; tc=$(timed "$T" compact --index s1cmp.idx --threads "$THREADS")
    tf=$(build s1all.idx s1)
    log "compact of the 11 segments: $(calc '%.2f s' "$tc/1e6"); fresh build of all 32k: $(calc '%.2f s' "$tf/1e6")"
    local ix r
    for ix in s1add10 s1cmp s1all; do
        sb --index "$ix.idx" --queries s1.queries.npy --query-ids s1.qids.txt --k 10 \
            --mode exhaustive --limit 200 --run "$ix.exh.run" --label "$ix-exh" >/dev/null
    done
    cmp -s s1add10.exh.run s1cmp.exh.run && log "exhaustive runs over 11 segments and compacted: identical" ||
        log "exhaustive runs over 11 segments and compacted: DIFFER"
    declare -A p50 p95 cpu
    for r in $(seq "$REPS"); do
        for ix in s1add10 s1cmp s1all; do
            local j; j=$(sb --index "$ix.idx" --queries s1.queries.npy --query-ids s1.qids.txt --k 10 \
                --limit 1000 --run "$ix.k10.run" --label "$ix-k10-rep$r")
            p50[$ix]="${p50[$ix]:-} $(echo "$j" | jfield p50_ms)"
            p95[$ix]="${p95[$ix]:-} $(echo "$j" | jfield p95_ms)"
            cpu[$ix]="${cpu[$ix]:-} $(echo "$j" | jfield cpu_p50_ms)"
        done
    done
    cmp -s s1add10.k10.run s1cmp.k10.run && log "PLAID runs over 11 segments and compacted: identical" ||
        log "PLAID runs over 11 segments and compacted: DIFFER"
    local base; base=$(med ${p50[s1all]})
    log ""
    log "| index (32k documents, 960k vectors) | segments | p50, median of $REPS runs | p50 range | p95 | cpu p50 | vs fresh build | recall@10 vs own exhaustive | MRR@10 planted | search RAM |"
    log "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for ix in s1add10 s1cmp s1all; do
        local m name; m=$(med ${p50[$ix]})
        case $ix in s1add10) name="base + 10 adds";; s1cmp) name="after tartan compact";; s1all) name="fresh build";; esac
        log "| $name | $(segs "$ix.idx") |" \
            "$m ms | $(minv ${p50[$ix]})-$(maxv ${p50[$ix]}) ms | $(med ${p95[$ix]}) ms | $(med ${cpu[$ix]}) ms |" \
            "$(calc '%.2fx' "$m/$base") | $(recall "$ix.k10.run" "$ix.exh.run") | $(mrr s1.qrels.tsv "$ix.k10.run") |" \
            "$(calc '%.1f MiB' "$(info_json "$ix.idx" resident_bytes)/1048576") |"
    done
}

# ------------------------------------------------------------------ delete
# Indexes of 8,333, 33,333 and 133,333 documents x 30 x 128-d (0.25M, 1M, 4M vectors).
# Each delete runs on a fresh copy of the index (cp -a): warm (the copy in the page
# cache, as after a build) and cold (every file of the copy dropped from the page cache
# first). Delete's wall time includes the process start and the fsyncs of the deletion
# list, MANIFEST and directory; the 1-id row is that fixed cost, and the marginal column
# is the time above it per id. DEL_REPS repetitions (default 7), median.
part_delete() {
    local n r c t reps=${DEL_REPS:-7}
    counts() { [ "$1" = 8333 ] && echo "1 333 3333" || echo "1 333 3333 13333"; }
    for n in 8333 33333 133333; do
        synth "d$n" --docs "$n" --doclen 30 --dim 128 --queries 10 --qlen 32 --noise 0.3 --seed 7 --f16
        if [ ! -f "d$n.idx/MANIFEST" ]; then
            t=$(build "d$n.idx" "d$n"); log "build d$n.idx: $(calc '%.1f s' "$t/1e6")"
        fi
        local all=$(( n < 13666 ? 3666 : 13666 ))
        shuf -n "$all" --random-source=<(yes) "d$n.ids.txt" >"del$n.all"
        for c in $(counts $n); do head -n "$c" "del$n.all" >"del$n.$c"; done
        tail -n 333 "del$n.all" >"del$n.more"
    done
    declare -A warm cold more
    for r in $(seq "$reps"); do
        for n in 8333 33333 133333; do
            for c in $(counts $n); do
                rm -rf dt.idx; cp -a "d$n.idx" dt.idx; sync -f dt.idx
                warm[$n.$c]="${warm[$n.$c]:-} $(timed "$T" delete --index dt.idx --ids "del$n.$c")"
                grep -q "^deleted $c documents" "$W/last.out" || { cat "$W/last.out"; exit 1; }
                [ "$c" = 3333 ] && more[$n]="${more[$n]:-} $(timed "$T" delete --index dt.idx --ids "del$n.more")"
                rm -rf dt.idx; cp -a "d$n.idx" dt.idx; evict dt.idx
                cold[$n.$c]="${cold[$n.$c]:-} $(timed "$T" delete --index dt.idx --ids "del$n.$c")"
            done
        done
    done
    rm -rf dt.idx
    log ""
    log "| index | ids deleted | warm: ms, median of $reps | warm: us per id | warm: us per id above the 1-id delete | cold: ms | cold: us per id above the 1-id delete |"
    log "|---|---:|---:|---:|---:|---:|---:|"
    for n in 8333 33333 133333; do
        local v w1 k1; v=$(info_json "d$n.idx" num_vectors)
        w1=$(med ${warm[$n.1]}); k1=$(med ${cold[$n.1]})
        for c in $(counts $n); do
            local w k; w=$(med ${warm[$n.$c]}); k=$(med ${cold[$n.$c]})
            local mw="" mk=""
            [ "$c" != 1 ] && mw=$(calc '%.2f' "($w-$w1)/($c-1)") && mk=$(calc '%.2f' "($k-$k1)/($c-1)")
            log "| $n docs, $(calc '%.2fM' "$v/1e6") vectors | $c | $(calc '%.1f' "$w/1e3") | $(calc '%.1f' "$w/$c") |" \
                "$mw | $(calc '%.1f' "$k/1e3") | $mk |"
        done
        local m; m=$(med ${more[$n]})
        log "| $n docs, 3333 deleted before | 333 | $(calc '%.1f' "$m/1e3") | $(calc '%.1f' "$m/333") |" \
            "$(calc '%.2f' "($m-$w1)/332") | | |"
    done
}

# ------------------------------------------------------------------ drift
# A: 17.6k documents from one tartan-synth collection (seed 11); the first 16k are the
# base, the last 1.6k are added after the retrain (same distribution). N: 8k documents
# of another collection (seed 12: other topic centres), ids n0..n7999, added to the base.
# Queries: 200 of each collection (A's first 200 target documents of the base).
part_drift() {
    synth da --docs 17600 --doclen 30 --dim 128 --queries 220 --qlen 32 --noise 0.3 --qnoise 0.2 \
        --topics 512 --seed 11
    synth dnraw --docs 8000 --doclen 30 --dim 128 --queries 200 --qlen 32 --noise 0.3 --qnoise 0.2 \
        --topics 512 --seed 12
    slice da 0 16000 da0; slice da 16000 17600 dalate; slice dnraw 0 8000 dn n
    sed 's/^q/nq/' dnraw.qids.txt >dn.qids
    sed 's/^q/nq/; s/\tdoc/\tn/' dnraw.qrels.tsv >dn.qrels
    cp dnraw.queries.npy dn.queries.npy
    cp da.qids.txt da.qids; head -n 201 da.qrels.tsv >da.qrels  # search_bench --limit 200 searches the first 200
    local t q ix
    # the exact reference: MaxSim over the float16 originals of all 24k documents
    build dfresh.idx da0,dn --keep-originals f16 >/dev/null
    rm -rf dfresh.idx  # again, timed with its CPU time (against compact --retrain below)
    t=$(timedu "$T" build --vectors da0.vectors.npy,dn.vectors.npy --doclens da0.doclens.npy,dn.doclens.npy \
        --ids "$W/dfresh.idx.ids" --out dfresh.idx --keep-originals f16 --threads "$THREADS")
    log "fresh build (24k docs, --keep-originals f16): wall ${t% *} s, user ${t#* } s"
    for q in dn da; do
        sb --index dfresh.idx --queries "$q.queries.npy" --query-ids "$q.qids" --k 10 --mode exact \
            --limit 200 --run "exact.$q.run" --label "exact-$q" >/dev/null
    done
    log ""
    log "| index | drift (tartan info) | queries for | PLAID recall@10 vs own exhaustive | PLAID recall@10 vs exact | exhaustive recall@10 vs exact | MRR@10 PLAID | MRR@10 exhaustive | added documents in the top 10, PLAID / exhaustive | candidates per query |"
    log "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    measure() { # INDEX LABEL QUERYSETS
        local ix=$1 label=$2 q dr; shift 2
        dr=$(info_json "$ix" drift.ratio 2>/dev/null || echo 0)
        [ "$dr" = 0 ] || [ "$dr" = 0.0 ] && dr="-"
        for q in "$@"; do
            local j; j=$(sb --index "$ix" --queries "$q.queries.npy" --query-ids "$q.qids" --k 10 \
                --limit 200 --run "$label.$q.run" --label "$label-$q")
            sb --index "$ix" --queries "$q.queries.npy" --query-ids "$q.qids" --k 10 --limit 200 \
                --mode exhaustive --run "$label.$q.exh.run" --label "$label-$q-exh" >/dev/null
            log "| $label | $dr | $([ $q = dn ] && echo added || echo base) documents |" \
                "$(recall "$label.$q.run" "$label.$q.exh.run") | $(recall "$label.$q.run" "exact.$q.run") |" \
                "$(recall "$label.$q.exh.run" "exact.$q.run") | $(mrr "$q.qrels" "$label.$q.run") |" \
                "$(mrr "$q.qrels" "$label.$q.exh.run") |" \
                "$(calc '%.1f' "$(grep -c ' n[0-9]' "$label.$q.run" || true)/200") / $(calc '%.1f' "$(grep -c ' n[0-9]' "$label.$q.exh.run" || true)/200") |" \
                "$(echo "$j" | jfield candidates | cut -d. -f1) |"
        done
    }
    local ko tc
    for ko in orig none; do
        local opt=(); [ $ko = orig ] && opt=(--keep-originals f16)
        build "d$ko.idx" da0 "${opt[@]}" >/dev/null
        measure "d$ko.idx" "$ko: base only" da
        add "d$ko.idx" dn >/dev/null
        measure "d$ko.idx" "$ko: base + 8k added" dn da
        rm -rf "d$ko-r.idx"; cp -a "d$ko.idx" "d$ko-r.idx"
        tc=$(timedu "$T" compact --index "d$ko-r.idx" --retrain --threads "$THREADS")
        measure "d$ko-r.idx" "$ko: after compact --retrain" dn da
        log "| ($ko: compact --retrain wall ${tc% *} s, user ${tc#* } s; held-out MSE before $(info_json "d$ko.idx" build.heldout_mse), after $(info_json "d$ko-r.idx" build.heldout_mse)) | | | | | | | | |"
    done
    measure dfresh.idx "fresh build of base + added" dn da
    # PLAID's centroid-score threshold on the drifted index (before the retrain)
    log ""
    sb --index dorig.idx --queries dn.queries.npy --query-ids dn.qids --k 10 --limit 200 \
        --mode exhaustive --run drifted.exh.run --label drifted-exh >/dev/null
    log "| orig: base + 8k added, queries for the added documents | threshold | PLAID recall@10 vs own exhaustive | PLAID recall@10 vs exact | MRR@10 | candidates | p50 |"
    log "|---|---:|---:|---:|---:|---:|---:|"
    local th
    for th in 0.5 0.4 0.3 0.2 0; do
        local j; j=$(sb --index dorig.idx --queries dn.queries.npy --query-ids dn.qids --k 10 --limit 200 \
            --threshold "$th" --run "th$th.run" --label "threshold-$th")
        log "| | $th | $(recall "th$th.run" drifted.exh.run) | $(recall "th$th.run" exact.dn.run) |" \
            "$(mrr dn.qrels "th$th.run") | $(echo "$j" | jfield candidates | cut -d. -f1) | $(echo "$j" | jfield p50_ms) ms |"
    done
    # The same distribution as the base, added after the retrain: drift should read ~1.
    log ""
    for ix in dorig-r dnone-r dfresh; do
        rm -rf dl.idx; cp -a "$ix.idx" dl.idx
        add dl.idx dalate >/dev/null
        log "1.6k more base-distribution documents added to $ix.idx: drift $(info_json dl.idx drift.ratio)" \
            "(added MSE $(info_json dl.idx drift.added_mse), held-out MSE $(info_json dl.idx build.heldout_mse))"
    done
    rm -rf dl.idx
}

# ------------------------------------------------------------------ memory
# The batch: 66,667 documents (2M vectors, float32, 977 MiB) from the distribution of the
# 4M-vector delete index (same seed and topics, other documents), added to a copy of it.
part_memory() {
    synth m --docs 66667 --doclen 30 --dim 128 --queries 10 --qlen 32 --noise 0.3 --seed 7 --topics 1460
    [ -f mm.ids.txt ] || sed 's/^doc/m/' m.ids.txt >mm.ids.txt
    [ -f d133333.idx/MANIFEST ] || part_delete
    local in mem; in=$(stat -c %s m.vectors.npy)
    for mem in 512M 128M; do
        rm -rf mem.idx; cp -a d133333.idx mem.idx
        log ""
        log "add of $(calc '%.2fM' "$(( (in - 128) / 512 ))/1e6") float32 vectors ($(calc '%.0f MiB' "$in/1048576")) to a $(info_json mem.idx num_vectors)-vector index, --memory $mem:"
        $PY "$here/rss_watch.py" "$T" add --index mem.idx --vectors m.vectors.npy --doclens m.doclens.npy \
            --ids mm.ids.txt --memory "$mem" --threads "$THREADS" 2>&1 | tee -a "$OUT"
    done
    rm -rf mem2.idx; cp -a mem.idx mem2.idx
    log "compact of the 2 segments ($(info_json mem.idx num_vectors) vectors; residuals $(calc '%.0f MiB' "$(info_json mem.idx bytes.residuals)/1048576"), codes $(calc '%.0f MiB' "$(info_json mem.idx bytes.codes)/1048576")), --memory 512M:"
    $PY "$here/rss_watch.py" "$T" compact --index mem.idx --memory 512M --threads "$THREADS" 2>&1 | tee -a "$OUT"
    log "compact --retrain of the same 2 segments (decompressed vectors), --memory 512M:"
    $PY "$here/rss_watch.py" "$T" compact --index mem2.idx --retrain --memory 512M --threads "$THREADS" 2>&1 | tee -a "$OUT"
    rm -rf mem.idx mem2.idx
}

for p in $PARTS; do
    log ""; log "=== $p (load $(cut -d' ' -f1-3 /proc/loadavg))"
    "part_$p"
done
