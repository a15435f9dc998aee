#!/bin/sh
# tartan build / info / verify from the command line: good builds, every bad input of
# the foundation issue (clear error naming the file, exit 1, no index left), --force
# semantics, a flipped byte in every file, and the real ColBERTv2 vectors.
. "${TT_SRCDIR:-.}/tests/lib.sh"
have_numpy || { echo "numpy missing: skip"; exit 77; }

"$SYNTH" --out "$WORK/c" --docs 400 --doclen 5-15 --dim 32 --queries 10 --qlen 4 2>/dev/null
V="$WORK/c.vectors.npy"; L="$WORK/c.doclens.npy"
expect_ok "build" "$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --out "$WORK/idx" --centroids 64 --threads 2
grep -q "built $WORK/idx: 400 documents" "$WORK/out" && ok "build summary" || bad "build summary: $(cat "$WORK/out")"
expect_ok "info" "$T" info "$WORK/idx"
grep -q "compression" "$WORK/out" && grep -q "search RAM" "$WORK/out" && ok "info text" || bad "info text"
expect_ok "info --json" "$T" info --json "$WORK/idx"
"$PY" -c "
import json,sys
j=json.load(open('$WORK/out'))
assert j['num_docs']==400 and j['dim']==32 and j['nbits']==2 and j['num_centroids']==64, j
assert j['bytes']['index'] > j['bytes']['residuals'] > 0
assert j['ratio_f16'] > 1 and j['resident_bytes'] > 0
" && ok "info --json fields" || bad "info --json fields"
expect_ok "verify" "$T" verify "$WORK/idx"

# The kernels OpenBLAS chose: --version names them, and says what this CPU could run
# where they are older (forced here: Prescott); the note about it is for terminals only.
OPENBLAS_CORETYPE=Prescott "$T" --version >"$WORK/ver" 2>&1
if grep -q "^OpenBLAS kernels: Prescott" "$WORK/ver"; then
    if grep -q avx2 /proc/cpuinfo 2>/dev/null; then
        grep -q "this CPU can run \(Haswell\|SkylakeX\)" "$WORK/ver" &&
            ok "--version: older OpenBLAS kernels named" || bad "--version: $(cat "$WORK/ver")"
    fi
    "$T" info "$WORK/idx" >/dev/null 2>"$WORK/err"
    grep -q "note: OpenBLAS" "$WORK/err" && bad "BLAS note off a terminal" || ok "no BLAS note off a terminal"
else
    ok "not OpenBLAS, or it ignores OPENBLAS_CORETYPE: $(tail -1 "$WORK/ver")"
fi

# An existing index is refused without --force and kept when a --force build fails.
expect_fail "exists without --force" "already exists" "$T" build --vectors "$V" --doclens "$L" --out "$WORK/idx"
before=$(cksum "$WORK/idx/MANIFEST")

# Bad inputs, made with numpy.
"$PY" - "$WORK" <<'PYEOF'
import numpy as np, sys, os
w = sys.argv[1]
v = np.load(w + "/c.vectors.npy"); l = np.load(w + "/c.doclens.npy")
open(w + "/notnpy.npy", "w").write("hello, I am not an array\n")
raw = open(w + "/c.vectors.npy", "rb").read(); open(w + "/trunc.npy", "wb").write(raw[: len(raw) // 2])
np.save(w + "/i8.npy", (v * 100).astype(np.int8))
np.save(w + "/f64.npy", v.astype(np.float64))
vb = v.astype(np.float64); vb[81, 2] = 1e300; np.save(w + "/f64big.npy", vb)
np.save(w + "/l_u1.npy", l.astype(np.uint8))
np.save(w + "/l_f8.npy", l.astype(np.float64))
np.save(w + "/one_d.npy", v.reshape(-1))
np.save(w + "/three_d.npy", v[: (len(v) // 2) * 2].reshape(-1, 2, v.shape[1]))
np.save(w + "/be.npy", v.astype(">f4"))
np.save(w + "/fortran.npy", np.asfortranarray(v))
l2 = l.copy(); l2[-1] += 1; np.save(w + "/badsum.npy", l2)
l3 = l.copy(); l3[5] = 0; l3[6] += l[5]; np.save(w + "/zero.npy", l3)
np.save(w + "/dim16.npy", v[:, :16].copy())
vn = v.copy(); vn[77, 3] = np.nan; np.save(w + "/nan.npy", vn)
vi = v.copy(); vi[78, 0] = np.inf; np.save(w + "/inf.npy", vi)
vz = v.copy(); vz[79] = 0; np.save(w + "/zerovec.npy", vz)
np.save(w + "/f16.npy", v.astype(np.float16))
PYEOF
b() { "$T" build --centroids 16 --threads 2 --no-tune "$@"; }
expect_fail "not an npy file" "notnpy.npy" b --vectors "$WORK/notnpy.npy" --doclens "$L" --out "$WORK/x"
expect_fail "truncated npy" "trunc.npy.*truncated" b --vectors "$WORK/trunc.npy" --doclens "$L" --out "$WORK/x"
expect_fail "unsupported dtype int8" "i8.npy: dtype '|i1' (int8) is not supported for vectors (supported: float32, float16, float64;" b --vectors "$WORK/i8.npy" --doclens "$L" --out "$WORK/x"
expect_fail "float doclens" "l_f8.npy: dtype '<f8' (float64) is not an integer array (supported: int8," b --vectors "$V" --doclens "$WORK/l_f8.npy" --out "$WORK/x"
expect_fail "float64 beyond float32's range" "f64big.npy: vector 81 (document [0-9]*) contains NaN or Inf" b --vectors "$WORK/f64big.npy" --doclens "$L" --out "$WORK/x"
expect_fail "1-D array" "one_d.npy.*2-D" b --vectors "$WORK/one_d.npy" --doclens "$L" --out "$WORK/x"
expect_fail "3-D array" "three_d.npy.*2-D" b --vectors "$WORK/three_d.npy" --doclens "$L" --out "$WORK/x"
expect_fail "big-endian" "be.npy" b --vectors "$WORK/be.npy" --doclens "$L" --out "$WORK/x"
expect_fail "fortran order" "fortran.npy" b --vectors "$WORK/fortran.npy" --doclens "$L" --out "$WORK/x"
expect_fail "doclens do not sum" "badsum.npy" b --vectors "$V" --doclens "$WORK/badsum.npy" --out "$WORK/x"
expect_fail "zero doclen" "zero.npy.*document 5" b --vectors "$V" --doclens "$WORK/zero.npy" --out "$WORK/x"
expect_fail "dim mismatch between files" "dim16.npy" b --vectors "$V,$WORK/dim16.npy" --doclens "$L,$L" --out "$WORK/x"
expect_fail "NaN vector" "nan.npy.*NaN" b --vectors "$WORK/nan.npy" --doclens "$L" --out "$WORK/x"
expect_fail "Inf vector" "inf.npy" b --vectors "$WORK/inf.npy" --doclens "$L" --out "$WORK/x"
expect_fail "all-zero vector" "zerovec.npy.*zeros" b --vectors "$WORK/zerovec.npy" --doclens "$L" --out "$WORK/x"
expect_fail "missing file" "nosuch.npy" b --vectors "$WORK/nosuch.npy" --doclens "$L" --out "$WORK/x"
[ ! -e "$WORK/x" ] && ok "no index left by failed builds" || bad "a failed build left $WORK/x"
ls -d "$WORK"/x.tmp-* >/dev/null 2>&1 && bad "a failed build left a temporary directory" || ok "no temporary directory left"
expect_fail "--force with a failing build" "nan.npy" b --vectors "$WORK/nan.npy" --doclens "$L" --out "$WORK/idx" --force
[ "$(cksum "$WORK/idx/MANIFEST")" = "$before" ] && ok "old index intact after failed --force" || bad "old index changed"
expect_ok "old index still verifies" "$T" verify "$WORK/idx"
expect_ok "float16 input with --force" b --vectors "$WORK/f16.npy" --doclens "$L" --out "$WORK/idx" --force --keep-originals f16
expect_ok "replaced index verifies" "$T" verify "$WORK/idx"
expect_ok "float64 vectors, uint8 doclens" b --vectors "$WORK/f64.npy" --doclens "$WORK/l_u1.npy" --out "$WORK/f64idx"
expect_ok "float64 index verifies" "$T" verify "$WORK/f64idx"
expect_ok "two shards" b --vectors "$V,$V" --doclens "$L,$L" --out "$WORK/two"
"$T" info --json "$WORK/two" | grep -q '"num_docs": 800' && ok "two shards: 800 docs" || bad "two shards count"

# Usage errors exit 2.
"$T" build --nbits 5 --vectors "$V" --doclens "$L" --out "$WORK/y" 2>/dev/null; [ $? -eq 2 ] && ok "bad --nbits is a usage error" || bad "bad --nbits"
# 3 bits exist only as the adaptive codec's average.
expect_fail "--nbits 3 with per-dim tables" "nbits 3 needs the adaptive codec" b --nbits 3 --codec per-dim --vectors "$V" --doclens "$L" --out "$WORK/y"
[ ! -e "$WORK/y" ] && ok "no index left by the refused codec" || bad "refused codec left $WORK/y"
expect_ok "--nbits 3, adaptive" b --nbits 3 --vectors "$V" --doclens "$L" --out "$WORK/b3"
expect_ok "3-bit index verifies" "$T" verify "$WORK/b3"
"$T" info --json "$WORK/b3" | grep -q '"nbits": 3' && ok "info: nbits 3" || bad "info nbits 3"
"$T" search --index "$WORK/b3" --queries "$V" --qlens "$L" --k 3 --out "$WORK/b3.run" 2>/dev/null && [ -s "$WORK/b3.run" ] && ok "3-bit index searches" || bad "3-bit search"
"$T" build --vectors "$V" 2>/dev/null; [ $? -eq 2 ] && ok "missing --out is a usage error" || bad "missing --out"

# A flipped byte anywhere is reported with the file name.
for f in "$WORK"/idx/*; do
    name=$(basename "$f")
    size=$(stat -c %s "$f")
    for off in 2 40 $((size / 2)) $((size - 1)); do
        cp "$f" "$WORK/orig"
        "$PY" -c "
import sys; p,o=sys.argv[1],int(sys.argv[2]); b=bytearray(open(p,'rb').read()); b[o]^=0x20; open(p,'wb').write(b)" "$f" "$off"
        "$T" verify "$WORK/idx" >/dev/null 2>"$WORK/err"; rc=$?
        if [ $rc -eq 1 ] && grep -q "$name" "$WORK/err"; then :; else bad "flip at $off in $name (exit $rc: $(cat "$WORK/err"))"; fi
        cp "$WORK/orig" "$f"
    done
done
ok "verify names every file with a flipped byte"
expect_ok "restored index verifies" "$T" verify "$WORK/idx"

# The real ColBERTv2 vectors.
E="${TT_DATA:-}/emb/colbertv2_nanofiqa"
if [ -d "$E" ]; then
    expect_ok "build nanofiqa" "$T" build --vectors "$E/doc_token_embeddings.npy" --doclens "$E/doclens.npy" --ids "$E/doc_ids.txt" --out "$WORK/nf" --threads 2 --keep-originals f16
    expect_ok "info nanofiqa" "$T" info "$WORK/nf"
    grep -q "documents    35" "$WORK/out" && grep -q "vectors      4430" "$WORK/out" && ok "nanofiqa counts" || bad "nanofiqa counts: $(cat "$WORK/out")"
    expect_ok "verify nanofiqa" "$T" verify "$WORK/nf"
else
    echo "# shared data absent: nanofiqa checks skipped"
fi
finish
