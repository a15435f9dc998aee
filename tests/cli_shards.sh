#!/bin/sh
# Sharded indexes in one process (doc/format.md, "Sharded indexes"): build --shards
# writes S ordinary indexes (info, verify, search work on each) that share the codebook
# an unsharded build trains; search over the top directory equals the unsharded index in
# exhaustive and exact modes, and in PLAID mode equals the per-shard runs merged by an
# independent model (score, then global row); damaged or changed shards and failed
# builds give clear errors and publish nothing.
. "${TT_SRCDIR:-.}/tests/lib.sh"
have_numpy || { echo "numpy missing: skip"; exit 77; }

"$SYNTH" --out "$WORK/c" --docs 400 --doclen 1-30 --dim 32 --queries 15 --qlen 4 2>/dev/null
V="$WORK/c.vectors.npy"; L="$WORK/c.doclens.npy"; Q="$WORK/c.queries.npy"
b() { "$T" build --vectors "$V" --doclens "$L" --centroids 32 --keep-originals f16 "$@"; }
s() { "$T" search --queries "$Q" --k 20 "$@" 2>/dev/null; }

expect_ok "build unsharded" b --out "$WORK/one"
expect_ok "build --shards 3" b --out "$WORK/sh" --shards 3
[ -f "$WORK/sh/SHARDS" ] && [ "$(ls "$WORK/sh" | tr '\n' ' ')" = "SHARDS shard-0000 shard-0001 shard-0002 " ] \
    && ok "a sharded index is SHARDS and shard-0000..0002" || bad "sharded layout: $(ls "$WORK/sh")"
cmp -s "$WORK/one/centroids.tt" "$WORK/sh/shard-0001/centroids.tt" && \
    cmp -s "$WORK/one/codec.tt" "$WORK/sh/shard-0002/codec.tt" && \
    ok "every shard holds the unsharded build's centroids and codec" || bad "codebooks differ"
docs=0
for i in 0 1 2; do
    d="$WORK/sh/shard-000$i"
    expect_ok "verify shard $i alone" "$T" verify "$d"
    n=$("$T" info --json "$d" | "$PY" -c "import json, sys; print(json.load(sys.stdin)['num_docs'])")
    docs=$((docs + n))
    [ "$n" -ge 133 ] && [ "$n" -le 134 ] && ok "shard $i holds a third of the documents ($n)" \
        || bad "shard $i holds $n documents"
done
"$T" info "$WORK/sh" | grep -q "^shard-0002   rows 266..399: 134 documents" \
    && ok "info lists the shards and their rows" || bad "info: $("$T" info "$WORK/sh" 2>&1)"
[ "$("$T" info --json "$WORK/sh" | "$PY" -c "import json, sys; j = json.load(sys.stdin)
print(j['num_docs'], j['num_shards'], sum(s['num_docs'] for s in j['shards']))")" = "400 3 400" ] \
    && ok "info --json of a sharded index" || bad "info --json: $("$T" info --json "$WORK/sh" 2>&1)"
expect_ok "verify the whole sharded index" "$T" verify "$WORK/sh"
grep -q "all 3 shards" "$WORK/out" && ok "verify names the shards it checked" || bad "verify output: $(cat "$WORK/out")"
[ $docs -eq 400 ] && ok "the shards hold every document once" || bad "shards hold $docs documents"

# exhaustive and exact: sharded = unsharded, byte for byte
for m in exhaustive exact; do
    s --index "$WORK/one" --mode $m --out "$WORK/one.$m"
    s --index "$WORK/sh" --mode $m --out "$WORK/sh.$m"
    [ -s "$WORK/one.$m" ] && cmp -s "$WORK/one.$m" "$WORK/sh.$m" \
        && ok "$m: the sharded index gives the unsharded run" || bad "$m: runs differ"
done
# plaid: each shard searched alone, merged by (score desc, global row asc); the ids are
# the global row numbers (no ids file)
for i in 0 1 2; do s --index "$WORK/sh/shard-000$i" --out "$WORK/p$i"; done
s --index "$WORK/sh" --out "$WORK/sh.plaid"
"$PY" - "$WORK" <<'PYEOF' && ok "plaid: sharded run = the shards' runs merged by score, then row" \
    || bad "plaid: sharded run is not the merge of the shards' runs"
import sys, collections
w = sys.argv[1]
hits = collections.defaultdict(list)
for i in range(3):
    for line in open(f"{w}/p{i}"):
        q, _, doc, _, score, _ = line.split()
        hits[q].append((-float(score), int(doc)))
want = []
for q in sorted(hits, key=int):
    for r, (ns, d) in enumerate(sorted(hits[q])[:20]):
        want.append((q, d, r + 1, -ns))
got = [(l.split()[0], int(l.split()[2]), int(l.split()[3]), float(l.split()[4]))
       for l in open(f"{w}/sh.plaid")]
sys.exit(0 if got == want and len(got) == 15 * 20 else 1)
PYEOF

# ids: a build with an ids file keeps them in every shard
"$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --centroids 32 --shards 2 \
    --out "$WORK/ids" >/dev/null 2>&1
"$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --centroids 32 \
    --out "$WORK/ids1" >/dev/null 2>&1
s --index "$WORK/ids" --mode exhaustive --out "$WORK/ids.run"
s --index "$WORK/ids1" --mode exhaustive --out "$WORK/ids1.run"
cmp -s "$WORK/ids.run" "$WORK/ids1.run" && ok "external ids: sharded run = unsharded" \
    || bad "external ids: runs differ"

# errors
"$PY" -c "
import numpy as np
np.save('$WORK/t.npy', np.random.default_rng(1).standard_normal((4, 8)).astype('float32'))
np.save('$WORK/tl.npy', np.array([2, 2], dtype='int32'))"
expect_fail "more shards than documents" "3 shards, but the input has only 2 documents" \
    "$T" build --vectors "$WORK/t.npy" --doclens "$WORK/tl.npy" --centroids 2 --shards 3 \
    --out "$WORK/tiny"
# a disk that fills up while the third shard is written, after two were complete
FI="${TT_BUILDDIR:-.}/tests/.libs/libfaultinject.so"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" # LD_PRELOAD under ASan
if [ -f "$FI" ]; then
    LD_PRELOAD="$FI" TT_FAIL_PATH=/shard-0002/ TT_FAIL_WRITE_AFTER=0 TT_FAIL_ERRNO=ENOSPC \
        expect_fail "a full disk in the last shard fails the sharded build" "shard-0002" \
        b --out "$WORK/full" --shards 3
    [ ! -e "$WORK/full" ] && [ -z "$(ls "$WORK" | grep 'full.tmp-')" ] \
        && ok "the failed sharded build left nothing" || bad "leftovers: $(ls "$WORK" | grep full)"
fi
expect_fail "--force does not replace a sharded index" "refusing to replace it" \
    b --out "$WORK/sh" --shards 3 --force
"$T" info "$WORK/sh/shard-0000" >/dev/null 2>&1 && ok "the sharded index is intact after that" \
    || bad "the sharded index was damaged"
expect_fail "compact of a sharded index as a whole is refused, saying why" \
    "a sharded index (SHARDS" "$T" compact --index "$WORK/sh"
[ "$(ls "$WORK/sh" | tr '\n' ' ')" = "SHARDS shard-0000 shard-0001 shard-0002 " ] \
    && ok "... and leaves the directory as it was" || bad "compact left: $(ls "$WORK/sh")"
# a shard changed on its own no longer fits the row space: refused, naming it
cp -r "$WORK/sh" "$WORK/sh2"
"$SYNTH" --out "$WORK/a" --docs 5 --doclen 1-5 --dim 32 --queries 1 --seed 3 2>/dev/null
"$T" add --index "$WORK/sh2/shard-0001" --vectors "$WORK/a.vectors.npy" \
    --doclens "$WORK/a.doclens.npy" >/dev/null 2>&1
expect_fail "a shard changed after the build is refused" "shard-0001: holds 138 documents" \
    "$T" search --index "$WORK/sh2" --queries "$Q" --out "$WORK/x"
cp -r "$WORK/sh" "$WORK/sh3"
printf 'X' | dd of="$WORK/sh3/SHARDS" bs=1 seek=100 conv=notrunc 2>/dev/null
expect_fail "a damaged SHARDS is refused" "SHARDS" \
    "$T" search --index "$WORK/sh3" --queries "$Q" --out "$WORK/x"
expect_fail "verify finds a damaged SHARDS" "SHARDS" "$T" verify "$WORK/sh3"
cp -r "$WORK/sh" "$WORK/sh4"
printf 'X' | dd of="$WORK/sh4/shard-0002/residuals.tt" bs=1 seek=200 conv=notrunc 2>/dev/null
expect_fail "verify finds a damaged residual file in a shard" "shard-0002/residuals.tt" \
    "$T" verify "$WORK/sh4"
finish
