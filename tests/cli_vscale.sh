#!/bin/sh
# Per-vector residual scales (doc/format.md, "Per-vector residual scales"): `--debias
# auto` (the default) gives one float16 scale per vector where the adaptive codec has
# 8-bit positions and debiased tables elsewhere; `--debias vector|table|none` ask for
# one; vscale.tt holds N scales after its header, and build, add, compaction (with and
# without retraining) write it, verify checks it, info shows it; bad requests are
# usage errors.
. "${TT_SRCDIR:-.}/tests/lib.sh"

"$SYNTH" --out "$WORK/o" --docs 400 --doclen 8 --dim 64 --queries 20 --qlen 4 \
    --outliers 2 --qnoise 0.8 --seed 5 2>/dev/null || { echo "tartan-synth failed"; exit 1; }
"$SYNTH" --out "$WORK/a" --docs 60 --doclen 8 --dim 64 --queries 1 --qlen 4 \
    --outliers 2 --seed 6 2>/dev/null || { echo "tartan-synth failed"; exit 1; }
"$SYNTH" --out "$WORK/i" --docs 200 --doclen 8 --dim 64 --queries 1 --qlen 4 \
    --seed 7 2>/dev/null || { echo "tartan-synth failed"; exit 1; }
sed 's/^/add-/' "$WORK/a.ids.txt" >"$WORK/a2.ids.txt"
V="--vectors $WORK/o.vectors.npy --doclens $WORK/o.doclens.npy --ids $WORK/o.ids.txt --no-tune"

# usage errors: exit 2, nothing written
"$T" build $V --out "$WORK/x" --debias sometimes >"$WORK/out" 2>"$WORK/err"
[ $? = 2 ] && grep -q "auto, table, vector or none" "$WORK/err" && [ ! -e "$WORK/x" ] \
    && ok "--debias sometimes: a usage error" || bad "--debias sometimes: $(cat "$WORK/err")"
expect_fail "--debias vector needs the adaptive codec" "adaptive" \
    "$T" build $V --out "$WORK/x" --codec per-dim --debias vector
[ ! -e "$WORK/x" ] && ok "... and writes nothing" || bad "left $WORK/x"

# auto: outlier dimensions get per-vector scales; isotropic vectors debiased tables
expect_ok "build (outlier dimensions, defaults)" "$T" build $V --out "$WORK/idx"
expect_ok "info" "$T" info "$WORK/idx"
grep -q "one residual scale per vector" "$WORK/out" && grep -q "scales" "$WORK/out" \
    && ok "info: one scale per vector, and their bytes" || bad "info: $(cat "$WORK/out")"
expect_ok "build (isotropic, defaults)" "$T" build --vectors "$WORK/i.vectors.npy" \
    --doclens "$WORK/i.doclens.npy" --out "$WORK/iso" --no-tune
[ ! -e "$WORK/iso/vscale.tt" ] && "$T" info --json "$WORK/iso" | grep -q '"debias": "table"' \
    && ok "no 8-bit dimensions: debiased tables, no vscale.tt" || bad "isotropic: $(ls "$WORK/iso")"
expect_ok "build --debias table" "$T" build $V --out "$WORK/tab" --debias table
[ ! -e "$WORK/tab/vscale.tt" ] && ok "--debias table: no vscale.tt" || bad "tab: $(ls "$WORK/tab")"
expect_ok "build --debias none" "$T" build $V --out "$WORK/nod" --debias none
[ ! -e "$WORK/nod/vscale.tt" ] && "$T" info --json "$WORK/nod" | grep -q '"debias": "none"' \
    && ok "--debias none: no vscale.tt, info says none" || bad "nod: $(ls "$WORK/nod")"
expect_ok "build --vector-scale" "$T" build $V --out "$WORK/vec" --vector-scale
cmp -s "$WORK/idx/vscale.tt" "$WORK/vec/vscale.tt" && cmp -s "$WORK/idx/residuals.tt" \
    "$WORK/vec/residuals.tt" && ok "auto = --vector-scale here, file for file" \
    || bad "auto and --vector-scale differ"

# The file, read independently: header TRTN VSCL, a = N vectors, b = 2, then N float16
# values, finite and >= 0, most of them positive.
check_vscale() {
    "$PY" - "$1" <<'PYEOF'
import glob, os, struct, sys
import numpy as np
d = sys.argv[1]
fs = sorted(glob.glob(os.path.join(d, "*vscale.tt")))
assert fs, "no vscale file"
for f in fs:
    s = open(f, "rb").read()
    r = open(f[:-len("vscale.tt")] + "residuals.tt", "rb").read()
    assert s[:4] == b"TRTN" and s[4:8] == b"VSCL", s[:8]
    n, b = struct.unpack("<QQ", s[16:32])
    assert n == struct.unpack("<Q", r[16:24])[0] and b == 2, (n, b)
    assert len(s) == 64 + 2 * n, (len(s), n)
    x = np.frombuffer(s[64:], dtype="<f2").astype(np.float64)
    assert np.all(np.isfinite(x)) and np.all(x >= 0), x
    assert np.mean(x > 0) > 0.9, np.mean(x > 0)
print(len(fs))
PYEOF
}
if have_numpy; then
    n=$(check_vscale "$WORK/idx") && [ "$n" = 1 ] && ok "vscale.tt: N finite scales >= 0" \
        || bad "vscale content ($n)"
fi
S() { "$T" search --index "$WORK/idx" --queries "$WORK/o.queries.npy" \
    --query-ids "$WORK/o.qids.txt" --k 10 --mode exhaustive "$@"; }
expect_ok "search, exhaustive" S --out "$WORK/e1"
expect_ok "search the table-debiased index" S --out "$WORK/e0" --index "$WORK/tab"
cmp -s "$WORK/e1" "$WORK/e0" && bad "the scales change no score" \
    || ok "the scales change the scores"

# add writes the new segment's scales; compaction keeps one file and the same results;
# a compaction that retrains keeps per-vector scales
expect_ok "add" "$T" add --index "$WORK/idx" --vectors "$WORK/a.vectors.npy" \
    --doclens "$WORK/a.doclens.npy" --ids "$WORK/a2.ids.txt"
[ "$(ls "$WORK/idx" | grep -c 'vscale\.tt$')" = 2 ] && ok "the added segment has its scales" \
    || bad "after add: $(ls "$WORK/idx")"
if have_numpy; then
    n=$(check_vscale "$WORK/idx") && [ "$n" = 2 ] && ok "both segments' scales are sound" \
        || bad "vscale content after add ($n)"
fi
expect_ok "verify after add" "$T" verify "$WORK/idx"
expect_ok "search after add" S --out "$WORK/r2"
expect_ok "compact" "$T" compact --index "$WORK/idx"
[ "$(ls "$WORK/idx" | grep -c 'vscale\.tt$')" = 1 ] && ok "compaction keeps one vscale.tt" \
    || bad "after compact: $(ls "$WORK/idx")"
expect_ok "verify after compact" "$T" verify "$WORK/idx"
expect_ok "search after compact" S --out "$WORK/r3"
cmp -s "$WORK/r2" "$WORK/r3" && ok "same results before and after compaction" \
    || bad "compaction changed the results"
expect_ok "compact --retrain" "$T" compact --index "$WORK/idx" --retrain
"$T" info --json "$WORK/idx" | grep -q '"debias": "vector"' && \
    [ "$(ls "$WORK/idx" | grep -c 'vscale\.tt$')" = 1 ] \
    && ok "a retrained index keeps per-vector scales" || bad "after retrain: $(ls "$WORK/idx")"
expect_ok "verify after retraining" "$T" verify "$WORK/idx"

# A flipped byte: the checksum catches it, and verify and open name the file.
cp -r "$WORK/vec" "$WORK/bad"
printf '\377' | dd of="$WORK/bad/vscale.tt" bs=1 seek=70 conv=notrunc 2>/dev/null
expect_fail "verify names a damaged vscale.tt" "vscale.tt" "$T" verify "$WORK/bad"
expect_fail "search names it" "vscale.tt" "$T" search --index "$WORK/bad" \
    --queries "$WORK/o.queries.npy" --k 10 --out "$WORK/bad.run"
# Without the file the index does not open (its residuals would decode wrong).
cp -r "$WORK/vec" "$WORK/gone"
rm "$WORK/gone/vscale.tt"
expect_fail "a missing vscale.tt is named" "vscale.tt" "$T" info "$WORK/gone"
finish
