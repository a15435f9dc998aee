#!/bin/sh
# The living index from the command line (doc/format.md, "Generations and segments"):
# tartan add (with ids, auto ids, a duplicate id, --upsert, --encoder), delete (--ids,
# --id, unknown ids, --strict), compact (and --retrain), info/--json and verify after
# every change; search never returns a deleted document in any mode or I/O path;
# compaction keeps the results bit for bit and leaves only the files its manifest
# names; usage errors; one writer at a time ("being modified by pid N"); SIGINT and
# SIGTERM during a change leave the index as it was and nothing behind.
# Races are made deterministic with the delay hooks of tests/faultinject.c.
. "${TT_SRCDIR:-.}/tests/lib.sh"
. "${TT_SRCDIR:-.}/tests/bg.sh"
cleanup() {
    kill_bg
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
[ -x "$PY" ] || { echo "python3 missing: skip"; exit 77; }
have_numpy || { echo "numpy missing (queries are cut from document vectors): skip"; exit 77; }
BD=$(cd "${TT_BUILDDIR:-.}" && pwd)
T="$BD/tartan"
SYNTH="$BD/tartan-synth"
HASH="$BD/tartan-hash-encoder"
FI="$BD/tests/.libs/libfaultinject.so"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" # LD_PRELOAD under ASan

# ------------------------------------------------------------------ helpers
# One line per case: every failed check of it is listed.
case_begin() { cid=$1; cdesc=$2; cfail=""; }
check() { # WHAT TEST...
    cw=$1; shift
    "$@" || cfail="$cfail; $cw"
}
case_end() {
    if [ -z "$cfail" ]; then ok "$cid $cdesc"; else bad "$cid $cdesc:${cfail#;}"; fi
}
note_err() { cfail="$cfail [exit $rc, stderr: $(head -c 300 "$E" | tr '\n' ' ')]"; }
rc_is() { [ "$rc" = "$1" ]; }
err_has() { grep -q -- "$1" "$E"; }
out_has() { grep -q -- "$1" "$O"; }
O="$WORK/out.txt"
E="$WORK/err.txt"
r() { "$@" >"$O" 2>"$E"; rc=$?; } # runs a command; $rc, stdout in $O, stderr in $E

verifies() { "$T" verify "$1" >/dev/null 2>&1; }
msum() { cksum <"$1/MANIFEST" 2>/dev/null; } # the current generation, byte for byte
# ij DIR EXPR: EXPR of `tartan info --json DIR` as j (python), printed
ij() {
    "$T" info --json "$1" 2>/dev/null | "$PY" -c "import json, sys
j = json.load(sys.stdin)
print($2)" 2>/dev/null
}
# state DIR: "generation live deleted segments"
state() { ij "$1" '"%d %d %d %d" % (j["generation"], j["live_docs"], j["deleted_docs"], len(j["segments"]))'; }
# The files MANIFEST names (parsed from the binary manifest: doc/format.md).
MF_PY='import struct, sys
b = open(sys.argv[1] + "/MANIFEST", "rb").read()
ver = struct.unpack_from("<I", b, 8)[0]
n = struct.unpack_from("<I", b, 64)[0]
head = 32 if ver == 2 else 8
for i in range(n):
    e = b[64 + head + 64 * i: 64 + head + 64 * i + 32]
    print(e.split(b"\0")[0].decode())'
named() { "$PY" -c "$MF_PY" "$1" | sort; }
# strays DIR: files of DIR other than MANIFEST that the manifest does not name (LOCK too:
# after a change that ended, graceful or not by SIGKILL, there is none)
strays() {
    named "$1" >"$WORK/named.txt" 2>/dev/null
    ls -A "$1" | grep -vx MANIFEST | sort | comm -23 - "$WORK/named.txt" | tr '\n' ' '
}
no_strays() { [ -z "$(strays "$1")" ]; }

failed() { [ "$wrc" != timeout ] && [ "$wrc" != 0 ]; } # ended with an error or by a signal
exists_glob() { for g in $*; do [ -e "$g" ] && return 0; done; return 1; }
lock_by() { grep -qs "$2" "$1/LOCK"; } # DIR PID: DIR/LOCK names PID

# srch IDX OUT MODE IO QUERIES [more options]: a top-1000 search (every document of the
# small collections: every id the index returns)
srch() {
    si=$1; so=$2; sm=$3; sio=$4; sq=$5; shift 5
    "$T" search --index "$si" --queries "$sq" --k 1000 --mode "$sm" --io "$sio" \
        --out "$so" --threads 1 "$@" 2>"$WORK/srch.err"
}
ids_of() { cut -d' ' -f3 "$1" | sort -u; } # the documents a run names
# dups RUN: (query, document) pairs named twice
dups() { cut -d' ' -f1,3 "$1" | sort | uniq -d | wc -l; }
# mrr QRELS RUN: MRR@10
mrr() { "$T" eval --qrels "$1" --run "$2" --json 2>/dev/null | "$PY" -c 'import json, sys
print(json.load(sys.stdin)["MRR@10"])'; }
ge() { "$PY" -c "import sys; sys.exit(0 if float('$1') >= float('$2') else 1)" 2>/dev/null; }

# ------------------------------------------------------------------ collections
# c: the index's documents (ids doc0...; rows 5 and 6 get the numeric ids 402 and 430,
# so that auto ids must skip one); n: 60 new documents (ids new0...) with 5 planted
# queries; u: 3 documents for --upsert (ids doc7, doc8, up0); a: 20 without ids.
"$SYNTH" --out "$WORK/c" --docs 400 --doclen 5-15 --dim 32 --queries 10 --qlen 4 >/dev/null 2>&1
"$SYNTH" --out "$WORK/n" --docs 60 --doclen 5-15 --dim 32 --queries 5 --qlen 4 --seed 9 \
    >/dev/null 2>&1
"$SYNTH" --out "$WORK/u" --docs 3 --doclen 5-15 --dim 32 --queries 1 --qlen 4 --seed 11 \
    >/dev/null 2>&1
"$SYNTH" --out "$WORK/a" --docs 20 --doclen 5-15 --dim 32 --queries 1 --qlen 4 --seed 12 \
    >/dev/null 2>&1
[ -s "$WORK/c.vectors.npy" ] && [ -s "$WORK/n.vectors.npy" ] || { bad "tartan-synth"; finish; }
grep -Eq '	doc[56]	' "$WORK/c.qrels.tsv" && bad "rows 5/6 are planted answers: pick others"
awk 'NR == 6 { print "402"; next } NR == 7 { print "430"; next } { print }' \
    "$WORK/c.ids.txt" >"$WORK/c.ids"
sed 's/^doc/new/' "$WORK/n.ids.txt" >"$WORK/n.ids"
sed 's/	doc/	new/' "$WORK/n.qrels.tsv" >"$WORK/n.qrels"
printf 'doc7\ndoc8\nup0\n' >"$WORK/u.ids"
# Queries cut from documents: the first 4 vectors of one document, [1, 4, dim].
"$PY" - "$WORK" <<'EOF' || bad "cutting queries from documents"
import numpy as np, sys
w = sys.argv[1]
def cut(prefix, row, out):
    v = np.load(prefix + ".vectors.npy"); l = np.load(prefix + ".doclens.npy")
    s = int(l[:row].sum())
    np.save(out, v[s:s + 4][None, :, :].astype(np.float32))
cut(w + "/c", 7, w + "/q_old7.npy")   # doc7 as built
cut(w + "/u", 0, w + "/q_new7.npy")   # doc7 as upserted
cut(w + "/u", 2, w + "/q_up0.npy")    # up0, new with the upsert
EOF

IDX="$WORK/idx"
# --no-tune: the generations below count the changes of this test (a calibration is a
# generation of its own; tests/cli_tune.sh covers it).
r "$T" build --vectors "$WORK/c.vectors.npy" --doclens "$WORK/c.doclens.npy" --ids "$WORK/c.ids" \
    --out "$IDX" --centroids 16 --threads 2 --keep-originals f16 --no-tune
case_begin S1 "build: generation 1, 400 live documents, one segment, verifies"
check "build exit $rc" rc_is 0
check "state $(state "$IDX")" [ "$(state "$IDX")" = "1 400 0 1" ]
check "verify" verifies "$IDX"
check "strays: $(strays "$IDX")" no_strays "$IDX"
case_end
# The planted queries before any change: exhaustive and exact find every answer.
srch "$IDX" "$WORK/r0.run" exhaustive uring "$WORK/c.queries.npy" --query-ids "$WORK/c.qids.txt"
m0=$(mrr "$WORK/c.qrels.tsv" "$WORK/r0.run")
echo "# the synthetic collection's MRR@10 (exhaustive) before any change: $m0"

# ------------------------------------------------------------------ add
r "$T" add --index "$IDX" --vectors "$WORK/n.vectors.npy" --doclens "$WORK/n.doclens.npy" \
    --ids "$WORK/n.ids" --threads 2
case_begin S2 "add --ids: a new segment, generation 2, the new documents found"
check "exit" rc_is 0
rc_is 0 || note_err
check "summary line" out_has "added 60 documents"
check "state $(state "$IDX")" [ "$(state "$IDX")" = "2 460 0 2" ]
check "verify" verifies "$IDX"
check "strays: $(strays "$IDX")" no_strays "$IDX"
check "LOCK left" [ ! -e "$IDX/LOCK" ]
for m in exhaustive exact; do
    srch "$IDX" "$WORK/rn.run" $m uring "$WORK/n.queries.npy" --query-ids "$WORK/n.qids.txt"
    mn=$(mrr "$WORK/n.qrels" "$WORK/rn.run")
    check "$m MRR@10 of the new documents' queries ${mn:-none}" ge "${mn:-0}" 0.9
done
case_end

r "$T" add --index "$IDX" --vectors "$WORK/a.vectors.npy" --doclens "$WORK/a.doclens.npy" \
    --threads 2
srch "$IDX" "$WORK/ra.run" exhaustive uring "$WORK/c.queries.npy"
ids_of "$WORK/ra.run" >"$WORK/ra.ids"
grep -Ex '[0-9]+' "$WORK/ra.ids" | sort -n >"$WORK/ra.num"
case_begin S3 "add without ids: 20 new numeric ids, none an id the index has"
check "exit" rc_is 0
rc_is 0 || note_err
check "state $(state "$IDX")" [ "$(state "$IDX")" = "3 480 0 3" ]
check "verify" verifies "$IDX"
check "run names $(wc -l <"$WORK/ra.ids") documents, not 480" [ "$(wc -l <"$WORK/ra.ids")" = 480 ]
check "numeric ids: $(tr '\n' ' ' <"$WORK/ra.num")" [ "$(wc -l <"$WORK/ra.num")" = 22 ]
check "an id twice in one ranking ($(dups "$WORK/ra.run"))" [ "$(dups "$WORK/ra.run")" = 0 ]
check "402 and 430 once each" [ "$(grep -Ec '^q?0 Q0 (402|430) ' "$WORK/ra.run")" = 2 ]
case_end

# An id already in the index: refused, nothing changes.
before=$(msum "$IDX")
r "$T" add --index "$IDX" --vectors "$WORK/u.vectors.npy" --doclens "$WORK/u.doclens.npy" \
    --ids "$WORK/u.ids"
case_begin S4 "add of an id already present: exit 1 naming it, upsert mentioned, unchanged"
check "exit" rc_is 1
check "names doc7" err_has "'doc7'"
check "mentions upsert" err_has "upsert"
check "MANIFEST changed" [ "$(msum "$IDX")" = "$before" ]
check "strays: $(strays "$IDX")" no_strays "$IDX"
check "verify" verifies "$IDX"
rc_is 1 || note_err
case_end

# --upsert: doc7 and doc8 replaced, up0 new.
r "$T" add --index "$IDX" --vectors "$WORK/u.vectors.npy" --doclens "$WORK/u.doclens.npy" \
    --ids "$WORK/u.ids" --upsert
case_begin S5 "add --upsert: replaces doc7/doc8 in one generation, adds up0"
check "exit" rc_is 0
rc_is 0 || note_err
check "summary: $(head -c 200 "$O")" out_has "2 replacing"
check "state $(state "$IDX")" [ "$(state "$IDX")" = "4 481 2 4" ]
check "verify" verifies "$IDX"
check "strays: $(strays "$IDX")" no_strays "$IDX"
for m in plaid exhaustive exact; do
    srch "$IDX" "$WORK/rn7.run" $m uring "$WORK/q_new7.npy"
    srch "$IDX" "$WORK/ro7.run" $m uring "$WORK/q_old7.npy"
    srch "$IDX" "$WORK/ru0.run" $m uring "$WORK/q_up0.npy"
    check "$m: new doc7 vectors rank 1: $(sed -n 1p "$WORK/rn7.run")" \
        grep -q '^0 Q0 doc7 1 ' "$WORK/rn7.run"
    check "$m: up0 at rank 1: $(sed -n 1p "$WORK/ru0.run")" grep -q '^0 Q0 up0 1 ' "$WORK/ru0.run"
    check "$m: old doc7 vectors still find doc7 first" \
        sh -c "! grep -q '^0 Q0 doc7 1 ' '$WORK/ro7.run'"
    check "$m: doc7 twice" [ "$(grep -c ' doc7 ' "$WORK/ro7.run")" -le 1 ]
done
case_end

# ------------------------------------------------------------------ add --encoder
# 40 passages of made-up words; each query repeats 3 words of an added passage, so the
# lexical hash encoder finds it.
"$PY" - "$WORK" <<'EOF'
import json, random, sys
w = sys.argv[1]
rng = random.Random(3)
syl = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pu", "gi", "fa"]
word = lambda: "".join(rng.choice(syl) for _ in range(3))
with open(w + "/corpus.jsonl", "w") as c, open(w + "/more.jsonl", "w") as m, \
        open(w + "/tq.jsonl", "w") as q:
    for i in range(48):
        words = [word() for _ in range(12)]
        (c if i < 40 else m).write(json.dumps({"_id": "d%d" % i, "title": "",
                                               "text": " ".join(words)}) + "\n")
        if i >= 40:
            q.write(json.dumps({"_id": "q%d" % i, "text": " ".join(words[2:5])}) + "\n")
EOF
EI="$WORK/eidx"
r "$T" build --encoder "$HASH --dim 64" --corpus "$WORK/corpus.jsonl" --out "$EI" \
    --centroids 16 --threads 2 --no-tune
rb=$rc
r "$T" add --index "$EI" --encoder "$HASH --dim 64" --corpus "$WORK/more.jsonl" --threads 2
ra=$rc
r "$T" search --index "$EI" --encoder "$HASH --dim 64" --queries "$WORK/tq.jsonl" --k 10 \
    --out "$WORK/e.run"
case_begin S6 "add --encoder --corpus, then search --encoder finds the added passages"
check "build exit $rb" [ "$rb" = 0 ]
check "add exit $ra" [ "$ra" = 0 ]
check "search exit" rc_is 0
check "state $(state "$EI")" [ "$(state "$EI")" = "2 48 0 2" ]
check "verify" verifies "$EI"
check "spool left: $(ls "$WORK" | grep -F encode- | tr '\n' ' ')" \
    sh -c "! ls '$WORK' | grep -qF encode-"
for i in 40 41 42 43 44 45 46 47; do
    check "q$i: $(grep "^q$i " "$WORK/e.run" | head -1)" grep -q "^q$i Q0 d$i 1 " "$WORK/e.run"
done
case_end
before=$(msum "$EI")
r "$T" add --index "$EI" --encoder "$HASH --dim 32" --corpus "$WORK/more.jsonl" --upsert
case_begin S6b "add --encoder of another dimension: exit 1 naming both, unchanged"
check "exit" rc_is 1
check "message" err_has "dimension 64.* 32"
check "MANIFEST changed" [ "$(msum "$EI")" = "$before" ]
check "strays: $(strays "$EI")" no_strays "$EI"
check "spool left" sh -c "! ls '$WORK' | grep -qF encode-"
rc_is 1 || note_err
case_end

# ------------------------------------------------------------------ delete
# doc25 is q0's planted answer; 403/404 auto ids; new5 added; up0 upserted; doc8 upserted
# (its new version goes; the old one is already gone); nosuch* are not in the index.
printf 'doc25\nnew5\n403\nnosuch1\n\ndoc8\nnosuch2\n' >"$WORK/del.ids"
r "$T" delete --index "$IDX" --ids "$WORK/del.ids"
case_begin S7 "delete --ids FILE: deletes the known ids, reports 2 unknown, exit 0"
check "exit" rc_is 0
rc_is 0 || note_err
check "summary: $(head -c 200 "$O")" out_has "deleted 4 documents"
check "unknown reported" out_has "2 of the ids are not in the index"
check "state $(state "$IDX")" [ "$(state "$IDX")" = "5 477 6 4" ]
check "verify" verifies "$IDX"
check "strays: $(strays "$IDX")" no_strays "$IDX"
case_end
r "$T" delete --index "$IDX" --id up0 --id 404 --id new5 --id doc30
case_begin S8 "delete --id X --id Y: an id deleted before counts as unknown"
check "exit" rc_is 0
rc_is 0 || note_err
check "summary: $(head -c 200 "$O")" out_has "deleted 3 documents"
check "unknown reported" out_has "1 of the ids are not in the index"
check "state $(state "$IDX")" [ "$(state "$IDX")" = "6 474 9 4" ]
check "verify" verifies "$IDX"
case_end
before=$(msum "$IDX")
r "$T" delete --index "$IDX" --id doc31 --id nosuch3 --strict
case_begin S9 "delete --strict with an unknown id: exit 1, nothing deleted"
check "exit" rc_is 1
check "names the id" err_has "nosuch3"
check "says nothing was deleted" err_has "nothing was deleted"
check "MANIFEST changed" [ "$(msum "$IDX")" = "$before" ]
check "strays: $(strays "$IDX")" no_strays "$IDX"
rc_is 1 || note_err
case_end
r "$T" delete --index "$IDX" --id nosuch4
case_begin S9b "delete of only unknown ids: exit 0, no new generation"
check "exit" rc_is 0
check "MANIFEST changed" [ "$(msum "$IDX")" = "$before" ]
check "LOCK left" [ ! -e "$IDX/LOCK" ]
case_end

deleted="doc25 new5 403 doc8 up0 404 doc30"
searches_hide() { # DIR LABEL: no search of any mode and I/O path returns a deleted id
    sh_fail=""
    for m in plaid exhaustive exact; do
        for io in uring mmap; do
            for q in c n; do
                if ! srch "$1" "$WORK/rd.run" $m $io "$WORK/$q.queries.npy"; then
                    sh_fail="$sh_fail $m/$io/$q: search failed ($(head -c 200 "$WORK/srch.err"))"
                    continue
                fi
                for d in $deleted; do
                    grep -q " Q0 $d " "$WORK/rd.run" && sh_fail="$sh_fail $m/$io/$q:$d"
                done
                [ "$(dups "$WORK/rd.run")" = 0 ] || sh_fail="$sh_fail $m/$io/$q:duplicates"
            done
        done
    done
    [ -z "$sh_fail" ]
}
case_begin S10 "no search (plaid/exhaustive/exact x uring/mmap) returns a deleted id"
searches_hide "$IDX"
check "returned:$sh_fail" [ -z "$sh_fail" ]
# and the documents still live are all there (exhaustive, every document)
srch "$IDX" "$WORK/rl.run" exhaustive mmap "$WORK/c.queries.npy"
check "exhaustive names $(ids_of "$WORK/rl.run" | wc -l) documents, not 474" \
    [ "$(ids_of "$WORK/rl.run" | wc -l)" = 474 ]
check "doc7 (upserted) live" grep -q ' Q0 doc7 ' "$WORK/rl.run"
case_end

# ------------------------------------------------------------------ info
r "$T" info --json "$IDX"
"$PY" - "$O" >"$WORK/py.err" 2>&1 <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["generation"] == 6, j["generation"]
assert j["live_docs"] == 474 and j["deleted_docs"] == 9, (j["live_docs"], j["deleted_docs"])
s = j["segments"]
assert [x["docs"] for x in s] == [400, 60, 20, 3], s
assert [x["deleted"] for x in s] == [4, 1, 2, 2], s  # doc25 doc30 doc7 doc8 / new5 / 403 404 / doc8 up0
assert sum(x["docs"] for x in s) == j["num_docs"] == 483, j["num_docs"]
assert [x["first_doc"] for x in s] == [0, 400, 460, 480], s
d = j["drift"]
assert d["added_vectors"] == sum(x["vectors"] for x in s[1:]), d
assert d["added_mse"] > 0 and d["ratio"] > 0, d
assert isinstance(d["retrain_advised"], bool), d
assert s[0]["added_mse"] == 0 and all(x["added_mse"] > 0 for x in s[1:]), s
EOF
pyrc=$?
r2rc=0
"$T" info "$IDX" >"$WORK/info.txt" 2>&1 || r2rc=$?
case_begin S11 "info --json: generation, live/deleted, segments, drift; info text"
check "exit" rc_is 0
check "json: $(tail -n 3 "$WORK/py.err" | tr '\n' ' ')" [ $pyrc = 0 ]
check "text exit $r2rc" [ $r2rc = 0 ]
check "text: generation" grep -q "generation 6" "$WORK/info.txt"
check "text: deleted" grep -q "474 live, 9 deleted" "$WORK/info.txt"
check "text: segments" grep -q "^segments  *4" "$WORK/info.txt"
check "text: drift" grep -q "^drift " "$WORK/info.txt"
case_end

# ------------------------------------------------------------------ compact
# The runs of every mode before and after: identical, line for line.
for m in plaid exhaustive exact; do
    srch "$IDX" "$WORK/pre.$m" $m uring "$WORK/c.queries.npy" --query-ids "$WORK/c.qids.txt"
    srch "$IDX" "$WORK/pren.$m" $m mmap "$WORK/n.queries.npy"
done
cp "$IDX/MANIFEST" "$WORK/pre.MANIFEST"
r "$T" compact --index "$IDX" --threads 2
# exactly the shared files and one g<N>. family
FAMILY_PY='import os, re, sys
d, shared, kinds = sys.argv[1], set(sys.argv[2].split()), set(sys.argv[3].split())
fam = {}
for f in os.listdir(d):
    if f == "MANIFEST" or f in shared:
        shared.discard(f); continue
    m = re.fullmatch(r"(g[0-9]+)\.([a-z]+)\.tt", f)
    if not m:
        sys.exit("unexpected file " + f)
    fam.setdefault(m.group(1), set()).add(m.group(2))
if shared:
    sys.exit("missing " + " ".join(sorted(shared)))
if len(fam) != 1 or set(fam.values().__iter__().__next__()) != kinds:
    sys.exit("families %r" % fam)'
SEGK="doclens codes residuals ivf ids idmap originals"
# Two runs: the same (query, document, rank) lines, scores within 1e-6 relative.
SAME_PY='import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for x, y in zip(a, b):
    assert x[:4] == y[:4], (x, y)
    assert abs(float(x[4]) - float(y[4])) <= 1e-6 * max(1.0, abs(float(x[4]))), (x, y)' 
case_begin S12 "compact: one segment, no deletions, identical runs, only its files"
check "exit" rc_is 0
rc_is 0 || note_err
check "summary: $(head -c 200 "$O")" out_has "474 documents in one segment (9 deleted"
check "state $(state "$IDX")" [ "$(state "$IDX")" = "7 474 0 1" ]
check "verify" verifies "$IDX"
check "strays: $(strays "$IDX")" no_strays "$IDX"
check "files: $("$PY" -c "$FAMILY_PY" "$IDX" "meta.tt centroids.tt codec.tt" "$SEGK" 2>&1)" \
    "$PY" -c "$FAMILY_PY" "$IDX" "meta.tt centroids.tt codec.tt" "$SEGK"
for m in plaid exhaustive exact; do
    srch "$IDX" "$WORK/post.$m" $m uring "$WORK/c.queries.npy" --query-ids "$WORK/c.qids.txt"
    srch "$IDX" "$WORK/postn.$m" $m mmap "$WORK/n.queries.npy"
    check "$m run differs" cmp -s "$WORK/pre.$m" "$WORK/post.$m"
    check "$m run (new documents) differs" cmp -s "$WORK/pren.$m" "$WORK/postn.$m"
    # the same documents at the same ranks, scores equal to float precision
    for p in "" n; do
        check "$m run$p: ids, ranks or scores differ beyond rounding" \
            "$PY" -c "$SAME_PY" "$WORK/pre$p.$m" "$WORK/post$p.$m"
    done
done
case_end
case_begin S13 "after compact: deleted ids still never returned"
searches_hide "$IDX"
check "returned:$sh_fail" [ -z "$sh_fail" ]
case_end

r "$T" compact --index "$IDX" --retrain --threads 2
# doc25 (q0's answer) is deleted: q0 is left out of the evaluation.
grep -v '^q0	' "$WORK/c.qrels.tsv" >"$WORK/c9.qrels"
case_begin S14 "compact --retrain: a new codebook, verifies, planted answers still found"
check "exit" rc_is 0
rc_is 0 || note_err
check "summary" out_has "with a new codebook"
check "state $(state "$IDX")" [ "$(state "$IDX")" = "8 474 0 1" ]
check "verify" verifies "$IDX"
check "strays: $(strays "$IDX")" no_strays "$IDX"
check "files: $("$PY" -c "$FAMILY_PY" "$IDX" "" "meta centroids codec $SEGK" 2>&1)" \
    "$PY" -c "$FAMILY_PY" "$IDX" "" "meta centroids codec $SEGK"
for m in exhaustive exact; do
    srch "$IDX" "$WORK/rt.run" $m uring "$WORK/c.queries.npy" --query-ids "$WORK/c.qids.txt"
    mc=$(mrr "$WORK/c9.qrels" "$WORK/rt.run")
    srch "$IDX" "$WORK/rtn.run" $m uring "$WORK/n.queries.npy" --query-ids "$WORK/n.qids.txt"
    mn=$(mrr "$WORK/n.qrels" "$WORK/rtn.run")
    check "$m MRR@10 ${mc:-none} (built collection)" ge "${mc:-0}" 0.9
    check "$m MRR@10 ${mn:-none} (added documents)" ge "${mn:-0}" 0.9
done
searches_hide "$IDX"
check "returned:$sh_fail" [ -z "$sh_fail" ]
case_end

# ------------------------------------------------------------------ errors
case_begin S15 "usage errors exit 2; a missing index exits 1 naming the cause"
r "$T" add --vectors "$WORK/n.vectors.npy" --doclens "$WORK/n.doclens.npy"
check "add without --index: exit $rc" rc_is 2
r "$T" add --index "$IDX"
check "add without vectors: exit $rc" rc_is 2
r "$T" add --index "$IDX" --encoder "$HASH" --vectors "$WORK/n.vectors.npy"
check "add --encoder without --corpus: exit $rc" rc_is 2
r "$T" delete --index "$IDX"
check "delete without ids: exit $rc" rc_is 2
r "$T" delete --id doc1
check "delete without --index: exit $rc" rc_is 2
r "$T" compact
check "compact without --index: exit $rc" rc_is 2
r "$T" compact --index "$IDX" --bogus
check "compact --bogus: exit $rc" rc_is 2
for c in "add --vectors $WORK/n.vectors.npy --doclens $WORK/n.doclens.npy" "delete --id x" \
    "compact"; do
    # shellcheck disable=SC2086
    r "$T" $c --index "$WORK/nonexistent"
    check "${c%% *} on a missing index: exit $rc" rc_is 1
    check "${c%% *}: $(head -c 100 "$E")" err_has "nonexistent: No such file or directory"
done
check "a directory appeared" [ ! -e "$WORK/nonexistent" ]
r "$T" delete --index "$WORK/nonexistent" --ids "$WORK/no-such-file"
check "delete --ids of a missing file: exit $rc" rc_is 1
check "names it" err_has "no-such-file"
check "verify" verifies "$IDX"
case_end

# ------------------------------------------------------------------ one writer
if [ -f "$FI" ]; then
    # An add slowed by 100 ms per read (about 40 reads) holds DIR/LOCK for seconds; a
    # delete meanwhile fails at once naming the add's pid; the add then succeeds.
    S="$WORK/lk"
    cp -a "$IDX" "$S"
    before=$(msum "$S")
    launch "$WORK/lk.out" "$WORK/lk.err" LD_PRELOAD="$FI" TT_DELAY_PREAD_MS=100 -- \
        "$T" add --index "$S" --vectors "$WORK/a.vectors.npy" --doclens "$WORK/a.doclens.npy" \
        --threads 1
    apid=$lpid
    case_begin S16 "a second writer fails at once: being modified by pid N"
    check "the add never took the lock" wait_for 30 "$apid" lock_by "$S" "$apid"
    t0=$(date +%s%N)
    r "$T" delete --index "$S" --id doc9
    t1=$(date +%s%N)
    kill -0 "$apid" 2>/dev/null || cfail="$cfail; the add ended before the delete (no race)"
    check "delete exit" rc_is 1
    check "message" err_has "being modified by pid $apid"
    check "delete took $(((t1 - t0) / 1000000)) ms" [ $(((t1 - t0) / 1000000)) -lt 2000 ]
    rc_is 1 && err_has "pid $apid" || note_err
    wait_pid "$apid" 60
    check "the add: exit $wrc ($(head -c 200 "$WORK/lk.err"))" [ "$wrc" = 0 ]
    check "state $(state "$S")" [ "$(state "$S")" = "9 494 0 2" ]
    check "verify" verifies "$S"
    check "strays: $(strays "$S")" no_strays "$S"
    check "doc9 deleted by the refused delete (a delete --strict of it fails)" \
        sh -c "'$T' delete --index '$S' --id doc9 --strict >/dev/null 2>&1"
    case_end

    # SIGINT / SIGTERM during a slowed add or compact: the index as it was, nothing left.
    # The signal comes when the change holds the lock (before writing) or when its first
    # g<N>. file exists (while writing).
    cp -a "$IDX" "$WORK/sig0"
    "$T" delete --index "$WORK/sig0" --id doc40 --id new10 >/dev/null 2>&1 # work to compact
    sigcase() { # ID SIGNAL add|compact lock|write
        S="$WORK/sig-$1"
        rm -rf "$S"
        cp -a "$WORK/sig0" "$S"
        cp "$S/MANIFEST" "$WORK/sig.MANIFEST"
        gnext=$(printf 'g%06d.' $(($(ij "$S" 'j["generation"]') + 1)))
        if [ "$3" = add ]; then
            set -- "$1" "$2" "$3" "$4" 100 "$T" add --index "$S" --vectors "$WORK/n.vectors.npy" \
                --doclens "$WORK/n.doclens.npy" --ids "$WORK/n.ids" --upsert --threads 1
        else
            set -- "$1" "$2" "$3" "$4" 150 "$T" compact --index "$S" --threads 1
        fi
        sid=$1; ssig=$2; sop=$3; sat=$4; sdelay=$5
        shift 5
        launch "$WORK/sig.out" "$WORK/sig.err" LD_PRELOAD="$FI" TT_DELAY_PREAD_MS="$sdelay" -- "$@"
        case_begin "$sid" "SIG$ssig during $sop ($sat phase): index as it was, nothing left"
        if [ "$sat" = lock ]; then
            check "never took the lock" wait_for 30 "$lpid" lock_by "$S" "$lpid"
        else
            check "never wrote a file" wait_for 30 "$lpid" exists_glob "$S/$gnext*"
        fi
        kill -0 "$lpid" 2>/dev/null || cfail="$cfail; the change ended before the signal"
        kill -s "$ssig" "$lpid" 2>/dev/null
        wait_pid "$lpid" 30
        check "exit $wrc" failed
        check "says: $(head -c 200 "$WORK/sig.err")" grep -q "interrupted by" "$WORK/sig.err"
        check "MANIFEST changed" cmp -s "$S/MANIFEST" "$WORK/sig.MANIFEST"
        check "verify" verifies "$S"
        check "left: $(strays "$S")" no_strays "$S"
        case_end
    }
    sigcase S17 INT add write
    sigcase S18 TERM add lock
    sigcase S19 TERM add write
    sigcase S20 INT compact write
    sigcase S21 TERM compact lock
    sigcase S22 HUP compact write

    # A signal while the manifest is being renamed into place (delayed 2 s): the change
    # is then past its last cancellation point. Whatever tartan does, what it says must
    # be true: exit 0 and the new generation, or a failure/the signal and the old one.
    # Once the rename has happened, "nothing was deleted" is false.
    for op in delete compact; do
        S="$WORK/pub-$op"
        rm -rf "$S"
        cp -a "$WORK/sig0" "$S"
        before=$(msum "$S")
        if [ $op = delete ]; then
            set -- "$T" delete --index "$S" --id doc50
        else
            set -- "$T" compact --index "$S" --threads 1
        fi
        launch "$WORK/pub.out" "$WORK/pub.err" LD_PRELOAD="$FI" TT_DELAY_RENAME_MS=2000 -- "$@"
        case_begin "S23-$op" "SIGTERM during the publication of a $op: exit status and message true"
        check "no MANIFEST.tmp seen" wait_for 30 "$lpid" exists_glob "$S/MANIFEST.tmp"
        sleep 0.2 # in the rename's delay
        kill -TERM "$lpid" 2>/dev/null
        wait_pid "$lpid" 30
        if [ "$wrc" = 0 ]; then
            check "exit 0 but the index did not change" [ "$(msum "$S")" != "$before" ]
        else
            check "exit $wrc ($(head -c 200 "$WORK/pub.err" | tr '\n' ' ')) but the index changed" \
                [ "$(msum "$S")" = "$before" ]
        fi
        check "verify" verifies "$S"
        check "left: $(strays "$S")" no_strays "$S"
        case_end
    done
else
    echo "# skip: $FI not built (make check builds it): no lock and signal cases"
fi

# ------------------------------------------------------------------ auto ids, later
# An auto id never takes the id of a document the index had: 430 (row 6) is deleted and
# compacted away; the next add without ids counts up from 421 past 430.
S="$WORK/auto"
cp -a "$IDX" "$S"
"$T" delete --index "$S" --id 430 >/dev/null 2>&1
"$T" compact --index "$S" --threads 2 >/dev/null 2>&1
r "$T" add --index "$S" --vectors "$WORK/a.vectors.npy" --doclens "$WORK/a.doclens.npy"
srch "$S" "$WORK/rauto.run" exhaustive mmap "$WORK/c.queries.npy"
case_begin S24 "auto ids after a compaction: not the id of a deleted document (430)"
check "exit" rc_is 0
check "state $(state "$S")" [ "$(state "$S")" = "11 493 0 2" ]
check "430 given to a new document" sh -c "! grep -q ' Q0 430 ' '$WORK/rauto.run'"
check "an id twice in one ranking" [ "$(dups "$WORK/rauto.run")" = 0 ]
case_end

# ------------------------------------------------------------------ what is not tartan's
# Files named as tartan names a change's files but written by someone else, a directory
# and a symlink under such names, the index reached through a symlink: a change that
# meets them fails naming the file, removes none of them (nor what a link points to),
# and leaves the index as it was; once they are out of the way the change works.
S="$WORK/foreign"
cp -a "$IDX" "$S"
ln -s "$S" "$WORK/foreign-link"
g=$(( $(state "$S" | cut -d' ' -f1) + 1 ))
gp=$(printf 'g%06d' "$g")
echo theirs >"$S/$gp.codes.tt"
echo theirs >"$S/$(printf 'g%06d' $((g + 1))).residuals.tt"
mkdir "$S/$gp.ivf.tt"
echo outside >"$WORK/outside.txt"
ln -s "$WORK/outside.txt" "$S/$gp.ids.tt"
before=$(msum "$S")
r "$T" add --index "$WORK/foreign-link" --vectors "$WORK/a.vectors.npy" \
    --doclens "$WORK/a.doclens.npy"
case_begin S25 "files of someone else's under tartan's names: kept; the change fails naming one"
check "exit $rc" rc_is 1
check "message" err_has "$gp.codes.tt: cannot create: File exists"
check "index changed" [ "$(msum "$S")" = "$before" ]
check "their file" grep -qx theirs "$S/$gp.codes.tt"
check "their other file" grep -qx theirs "$S/$(printf 'g%06d' $((g + 1))).residuals.tt"
check "their directory" [ -d "$S/$gp.ivf.tt" ]
check "their link" [ -L "$S/$gp.ids.tt" ]
check "the linked file" grep -qx outside "$WORK/outside.txt"
check "the index link" [ -L "$WORK/foreign-link" ]
check "verify" verifies "$S"
mv "$S/$gp.codes.tt" "$WORK/theirs.codes"
r "$T" compact --index "$WORK/foreign-link"
check "compact past the moved file: exit $rc" rc_is 1
check "compact message" err_has "$gp\.[a-z]*\.tt: cannot create: File exists"
rmdir "$S/$gp.ivf.tt"
rm "$S/$gp.ids.tt"
r "$T" compact --index "$WORK/foreign-link"
check "compact once they are gone: exit $rc" rc_is 0
check "their file after the compaction" grep -qx theirs "$S/$(printf 'g%06d' $((g + 1))).residuals.tt"
check "verify after" verifies "$S"
case_end
finish
