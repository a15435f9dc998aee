#!/bin/sh
# Regression tests for values tartan must not accept silently (groups B10, B11, B12, B14,
# B15): vectors beyond float16's range with --keep-originals f16, non-finite centroids,
# damaged resident index files found by `tartan search` (not only `tartan verify`),
# --ndocs below --k, trec_eval 10.0's double scores, and small CLI matters (messages,
# dtypes, score precision, encoder mismatch warning). Errors exit 1, usage errors exit 2.
. "${TT_SRCDIR:-.}/tests/lib.sh"
have_numpy || { echo "numpy missing: skip"; exit 77; }
HASH="${TT_BUILDDIR:-.}/tartan-hash-encoder"
DOC="${TT_SRCDIR:-.}/doc"
# Every tartan call is bounded, so a regression cannot hang the suite.
tt() { timeout 60 "$T" "$@"; }
run_err() { "$@" >"$WORK/out" 2>"$WORK/err"; rc=$?; }
# check DESC WANT-EXIT RE...: the last run_err exited WANT-EXIT and its stderr matches
# every extended regular expression RE (case-insensitive); an RE starting with '!' must
# not match.
check() {
    desc=$1; want=$2; shift 2
    if [ "$rc" -ne "$want" ]; then
        bad "$desc (exit $rc, want $want; stderr: $(head -c 300 "$WORK/err"))"
        return
    fi
    for re in "$@"; do
        case $re in
        !*) if grep -Eqi -- "${re#!}" "$WORK/err"; then
                bad "$desc (stderr matches /${re#!}/: $(head -c 300 "$WORK/err"))"; return
            fi ;;
        *) if ! grep -Eqi -- "$re" "$WORK/err"; then
                bad "$desc (stderr lacks /$re/: $(head -c 300 "$WORK/err"))"; return
            fi ;;
        esac
    done
    ok "$desc"
}
# per_query RUN N: every query of the 10 has exactly N lines in RUN.
per_query() {
    [ -s "$1" ] && awk -v n="$2" '{ c[$1]++ } END { if (length(c) != 10) exit 1; for (q in c) if (c[q] != n) exit 1 }' "$1"
}

"$SYNTH" --out "$WORK/c" --docs 400 --doclen 5-15 --dim 32 --queries 10 --qlen 4 2>/dev/null \
    || { echo "tartan-synth failed"; exit 1; }
V="$WORK/c.vectors.npy"; L="$WORK/c.doclens.npy"; Q="$WORK/c.queries.npy"; IDS="$WORK/c.ids.txt"
b() { tt build --centroids 16 --threads 2 --no-tune "$@"; }
S() { tt search --index "$1" --queries "${Q2:-$Q}" --query-ids "$WORK/c.qids.txt" --out "$2"; }

"$PY" - "$WORK" <<'PYEOF' || { echo "numpy setup failed"; exit 1; }
import numpy as np, sys
w = sys.argv[1]
v = np.load(w + "/c.vectors.npy"); l = np.load(w + "/c.doclens.npy"); q = np.load(w + "/c.queries.npy")
assert v.dtype == np.float32 and l.dtype == np.int64 and q.dtype == np.float32
big = v.copy(); big[77, 3] = 1e6  # float16's largest finite value is 65504
np.save(w + "/f16range.npy", big)
np.save(w + "/tiny.npy", v * np.float32(1e-6))
np.save(w + "/vec_f64.npy", v.astype(np.float64))
np.save(w + "/vec_i8.npy", (v * 100).astype(np.int8))
np.save(w + "/q_f64.npy", q.astype(np.float64))
np.save(w + "/dl_f32.npy", l.astype(np.float32))
np.save(w + "/dl_f64.npy", l.astype(np.float64))
for t in ("uint8", "int16", "uint32"):
    a = np.array(l.tolist(), dtype=t)
    assert a.dtype == np.dtype(t) and (a == l).all()
    np.save(w + "/dl_%s.npy" % t, a)
PYEOF

expect_ok "setup: build the reference index (--ids)" b --vectors "$V" --doclens "$L" --ids "$IDS" --out "$WORK/idx"
expect_ok "setup: search the reference index" S "$WORK/idx" "$WORK/idx.run"
per_query "$WORK/idx.run" 10 && ok "setup: 10 results per query" || bad "setup: 10 results per query"

# ================================================================ B10 float16 range
run_err b --vectors "$WORK/f16range.npy" --doclens "$L" --no-normalize --keep-originals f16 --out "$WORK/x10"
check "B10a value 1e6 with --keep-originals f16: exit 1, names the file, vector, float16" 1 \
    "f16range\.npy" "vector" "float16"
[ ! -e "$WORK/x10" ] && ok "B10a no index left" || bad "B10a an index was written with an Inf in originals.tt"

# B10b: an Inf in centroids.tt with every checksum recomputed (file header, MANIFEST
# entry, MANIFEST header). Needs an XXH64/XXH32 implementation (python xxhash).
if "$PY" -c 'import xxhash' 2>/dev/null; then
    cat >"$WORK/rehash.py" <<'PYEOF'
# rehash.py INDEX VALUE: set centroid 0, dimension 0 to VALUE ("inf" or a number) and
# make every checksum consistent again.
import struct, sys, xxhash
idx, value = sys.argv[1], float(sys.argv[2])
def h64(b): return xxhash.xxh64(bytes(b), seed=0).intdigest()
def h32(b): return xxhash.xxh32(bytes(b), seed=0).intdigest()
def reseal(b):  # header checksums of a whole file image (bytearray)
    struct.pack_into("<Q", b, 48, h64(b[64:]))
    struct.pack_into("<I", b, 60, h32(b[:60]))
c = bytearray(open(idx + "/centroids.tt", "rb").read())
assert c[:8] == b"TRTNCENT"
struct.pack_into("<f", c, 64, value)
reseal(c)
open(idx + "/centroids.tt", "wb").write(c)
m = bytearray(open(idx + "/MANIFEST", "rb").read())
n = struct.unpack_from("<I", m, 64)[0]
for i in range(n):
    e = 64 + 8 + 64 * i
    if m[e:e + 32].rstrip(b"\0") == b"centroids.tt":
        struct.pack_into("<Q", m, e + 48, h64(c[64:]))
        break
else:
    sys.exit("centroids.tt not in MANIFEST")
reseal(m)
open(idx + "/MANIFEST", "wb").write(m)
PYEOF
    rm -rf "$WORK/ok10"; cp -r "$WORK/idx" "$WORK/ok10"
    if "$PY" "$WORK/rehash.py" "$WORK/ok10" 0.125 && tt verify "$WORK/ok10" >/dev/null 2>&1; then
        ok "B10b control: a finite edit with recomputed checksums verifies"
        rm -rf "$WORK/inf10"; cp -r "$WORK/idx" "$WORK/inf10"
        "$PY" "$WORK/rehash.py" "$WORK/inf10" inf
        run_err tt verify "$WORK/inf10"
        check "B10b verify refuses an Inf in centroids.tt: exit 1, names centroids.tt" 1 "centroids\.tt"
        run_err S "$WORK/inf10" "$WORK/inf10.run"
        check "B10b search refuses an Inf in centroids.tt: exit 1, names centroids.tt" 1 "centroids\.tt"
    else
        bad "B10b control: recomputed checksums not accepted by tartan verify (rehash.py is wrong)"
    fi
else
    ok "B10b skipped: python3 has no xxhash module to recompute XXH64/XXH32 checksums"
fi

# ================================================================ B11 resident files
# One damaged byte in each file that search maps: search (default mode) must refuse the
# index, naming the file and its checksum. Offsets are inside the payload (after the
# 64-byte header); 'subtle' flips keep the structure valid (an in-range centroid id, a
# non-zero IVF gap), so only the checksum can tell.
cat >"$WORK/flip.py" <<'PYEOF'
import struct, sys
path, where, mask = sys.argv[1], sys.argv[2], int(sys.argv[3], 0)
b = bytearray(open(path, "rb").read())
H = 64
if where == "float":            # low mantissa byte of the first float
    off = H
elif where == "code":           # low byte of vector 18's centroid id (u16)
    off = H + 2 * 18
elif where == "doclen":         # low byte of document 0's length
    off = H
elif where == "ivfdata":        # first byte of the list data
    k = struct.unpack_from("<Q", b, 16)[0]
    off = H + 8 * (k + 1) + 4 * k
elif where == "ivfgap":         # a one-byte odd gap >= 3 inside list 0 (gap - 1 stays > 0)
    k = struct.unpack_from("<Q", b, 16)[0]
    data = H + 8 * (k + 1) + 4 * k
    o0, o1 = struct.unpack_from("<QQ", b, H)
    p, first, off = data + o0, True, None
    while p < data + o1:
        start, v, s = p, 0, 0
        while True:
            v |= (b[p] & 0x7F) << s; s += 7; p += 1
            if not b[p - 1] & 0x80:
                break
        if not first and p - start == 1 and v >= 3 and v % 2 == 1:
            off = start
            break
        first = False
    assert off is not None, "no suitable gap in list 0"
elif where == "idbyte":         # second byte of document 0's id
    d = struct.unpack_from("<Q", b, 16)[0]
    off = H + 8 * (d + 1) + 1
elif where == "created":        # a digit of the creation year in meta.tt
    off = b.index(b"created=", H) + len("created=") + 3
else:
    sys.exit("bad location " + where)
assert H <= off < len(b)
b[off] ^= mask
open(path, "wb").write(b)
PYEOF
for spec in centroids.tt:float:0xff codec.tt:float:0xff codes.tt:code:0xff codes.tt:code:0x01 \
    doclens.tt:doclen:0xff ivf.tt:ivfdata:0xff ivf.tt:ivfgap:0x01 ids.tt:idbyte:0xff \
    meta.tt:created:0xff; do
    f=${spec%%:*}; rest=${spec#*:}; where=${rest%:*}; mask=${rest#*:}
    rm -rf "$WORK/d11"; cp -r "$WORK/idx" "$WORK/d11"
    if ! "$PY" "$WORK/flip.py" "$WORK/d11/$f" "$where" "$mask"; then
        bad "B11 $f: could not damage the file ($where)"; continue
    fi
    run_err S "$WORK/d11" "$WORK/d11.run"
    check "B11 $f ($where byte ^ $mask): search exits 1 naming $f and checksum" 1 "$f" "checksum"
done
rm -rf "$WORK/d11"

# ================================================================ B12 search parameters
rm -f "$WORK/nd.run"
run_err tt search --index "$WORK/idx" --queries "$Q" --query-ids "$WORK/c.qids.txt" --k 10 --ndocs 5 \
    --out "$WORK/nd.run"
if [ $rc -eq 0 ] && per_query "$WORK/nd.run" 10; then
    ok "B12a --k 10 --ndocs 5 returns 10 results per query"
else
    bad "B12a --k 10 --ndocs 5 (exit $rc): results per query $(cut -d' ' -f1 "$WORK/nd.run" 2>/dev/null | uniq -c | awk '{ print $1 }' | sort -u | tr '\n' ' ')"
fi

# ================================================================ B14 trec_eval 10.0
if "$PY" -c '
import numpy as np
a, b = 0.30000001, 0.30000002
assert a != b and a < b and np.float32(a) == np.float32(b)
'; then
    printf 'q1 0 d_rel 1\n' >"$WORK/b14.qrels"
    printf 'q1 Q0 d_rel 1 0.30000001 t\nq1 Q0 d_non 2 0.30000002 t\n' >"$WORK/b14.run"
    run_err tt eval --qrels "$WORK/b14.qrels" --run "$WORK/b14.run" -m MRR@10 --json --digits 6
    if [ $rc -eq 0 ] && "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); assert abs(j['MRR@10'] - 0.5) < 1e-9, j" \
        "$WORK/out" 2>/dev/null; then
        ok "B14a scores distinct only as doubles: MRR@10 = 0.5"
    else
        bad "B14a MRR@10 (exit $rc): $(head -c 200 "$WORK/out")"
    fi
else
    bad "B14a setup: 0.30000001 / 0.30000002 are not distinct doubles with one float32"
fi
grep -q "trec_eval 10\.0" "$DOC/metrics.md" && ok "B14a doc/metrics.md says trec_eval 10.0" \
    || bad "B14a doc/metrics.md does not say trec_eval 10.0 ($(grep -o 'trec_eval [0-9][0-9.x]*' "$DOC/metrics.md" | head -1))"

# ================================================================ B15 small things
run_err tt info /nonexistent/x
check "B15a info /nonexistent/x: exit 1, No such file or directory" 1 "No such file or directory"

run_err b --vectors "$V" --doclens "$L" --memory 1K --out "$WORK/x15b"
check "B15b --memory 1K: exit 2, no mention of sample factor" 2 "!sample factor"

run_err b --vectors "$V" --doclens "$WORK/dl_f32.npy" --out "$WORK/x15c"
check "B15c float32 doclens: exit 1, names the file, integer dtypes, not float16" 1 \
    "dl_f32\.npy" "int" "!float16|'<f2'"
run_err b --vectors "$V" --doclens "$WORK/dl_f64.npy" --out "$WORK/x15c"
check "B15c float64 doclens: exit 1, names the file, integer dtypes, not float16" 1 \
    "dl_f64\.npy" "int" "!float16|'<f2'"
run_err b --vectors "$WORK/vec_i8.npy" --doclens "$L" --out "$WORK/x15c"
check "B15c int8 vectors: exit 1, names the file, lists float32/float16/float64, no int32/int64" 1 \
    "vec_i8\.npy" "float32" "float16" "float64" "!int32|int64|'<i4'|'<i8'"

expect_ok "B15d float64 vectors are accepted" b --vectors "$WORK/vec_f64.npy" --doclens "$L" --ids "$IDS" \
    --out "$WORK/idx64"
if [ -d "$WORK/idx64" ] && S "$WORK/idx64" "$WORK/idx64.run" 2>/dev/null && cmp -s "$WORK/idx.run" "$WORK/idx64.run"; then
    ok "B15d float64 build gives the float32 build's run"
else
    bad "B15d float64 build gives the float32 build's run"
fi

for t in uint8 int16 uint32; do
    expect_ok "B15e $t doclens are accepted" b --vectors "$V" --doclens "$WORK/dl_$t.npy" --out "$WORK/idx_$t"
done

expect_ok "B15f setup: build raw vectors scaled by 1e-6 (--no-normalize)" b --vectors "$WORK/tiny.npy" \
    --doclens "$L" --no-normalize --out "$WORK/tiny"
rm -f "$WORK/tiny.run"
S "$WORK/tiny" "$WORK/tiny.run" 2>/dev/null
"$PY" - "$WORK/tiny.run" 2>"$WORK/err" <<'PYEOF' && ok "B15f scores of 1e-6 vectors printed with >= 6 significant digits, distinct" \
    || bad "B15f scores: $(tail -1 "$WORK/err")"
import re, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault(f[0], []).append(f[4])
assert len(runs) == 10, len(runs)
def sig(s):  # significant digits as printed
    m = s.lstrip("+-").lower().split("e")[0].replace(".", "").lstrip("0")
    return len(m)
best = 0
for q, scores in runs.items():
    assert all(float(s) != 0 for s in scores), (q, scores)
    assert len(set(scores)) >= 0.8 * len(scores), (q, scores)  # distinct documents, distinct scores
    best = max(best, max(sig(s) for s in scores))
assert best >= 6, best
PYEOF

# B15g: the index stores the passage encoder's description; a query encoder that
# describes itself differently (same dim, different options) gets a warning.
"$PY" - "$WORK" <<'PYEOF'
import json, random, sys
w = sys.argv[1]
rng = random.Random(3)
vocab = ("shock wave supersonic flow boundary layer plate heat transfer laminar turbulent "
         "wing flutter transonic speed pressure gradient nozzle jet mixing cylinder wake "
         "vortex shedding airfoil lift drag stall compressor blade cascade panel").split()
t = lambda n: " ".join(rng.choice(vocab) for _ in range(n))
with open(w + "/corpus.jsonl", "w") as f:
    for i in range(40):
        f.write(json.dumps({"_id": "doc%d" % i, "text": t(10)}) + "\n")
with open(w + "/queries.jsonl", "w") as f:
    for i in range(5):
        f.write(json.dumps({"_id": "q%d" % i, "text": t(3)}) + "\n")
PYEOF
expect_ok "B15g setup: build --encoder 'tartan-hash-encoder --dim 32'" tt build --encoder "$HASH --dim 32" \
    --encoder-timeout 30 --corpus "$WORK/corpus.jsonl" --out "$WORK/enc" --centroids 16 --threads 2 \
    --no-tune
run_err tt search --index "$WORK/enc" --encoder "$HASH --dim 32" --encoder-timeout 30 \
    --queries "$WORK/queries.jsonl" --out "$WORK/enc1.run"
check "B15g control: the same query encoder, no warning" 0 "!warning"
run_err tt search --index "$WORK/enc" --encoder "$HASH --dim 32 --no-stem" --encoder-timeout 30 \
    --queries "$WORK/queries.jsonl" --out "$WORK/enc2.run"
check "B15g query encoder described differently (--no-stem): exit 0 with a warning" 0 "warning"

rm -f "$WORK/q64.run"
Q2="$WORK/q_f64.npy"; run_err S "$WORK/idx" "$WORK/q64.run"; Q2=
check "B15h float64 queries are accepted" 0
cmp -s "$WORK/idx.run" "$WORK/q64.run" && ok "B15h float64 queries give the float32 queries' run" \
    || bad "B15h float64 queries give the float32 queries' run"
finish
