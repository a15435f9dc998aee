#!/bin/sh
# Replays every fuzz seed and every input that ever crashed a fuzz target
# (tests/fuzz/regress/TARGET/) through the target's entry point, built without
# libFuzzer (tests/fuzz/driver.c). Under --enable-sanitizers this runs with ASan +
# UBSan, so an out-of-bounds read that came back fails here.
. "${TT_SRCDIR:-.}/tests/lib.sh"
R="${TT_BUILDDIR:-.}/tests/fuzz"
C="${TT_SRCDIR:-.}/tests/fuzz"
F="${TT_SRCDIR:-.}/tests/files"
replay() { # target dirs...
    t=$1; shift
    dirs=""
    for d in "$@"; do [ -d "$d" ] && dirs="$dirs $d"; done
    # shellcheck disable=SC2086
    if "$R/replay_$t" $dirs >"$WORK/out" 2>"$WORK/err"; then
        ok "replay $t: $(cat "$WORK/out")"
    else
        bad "replay $t (exit $?): $(tail -c 1500 "$WORK/err")"
    fi
}
replay npy "$F/good" "$F/bad" "$F/unsupported" "$C/corpus/npy" "$C/regress/npy"
replay fvecs "$F/good" "$F/bad" "$C/corpus/fvecs" "$C/regress/fvecs"
replay ids "$F/good" "$F/bad" "$C/corpus/ids" "$C/regress/ids"
replay index "$C/corpus/index" "$C/regress/index"
replay eval "$C/corpus/eval" "$C/regress/eval"
replay records "$C/corpus/records" "$C/regress/records"
replay encoder "$C/corpus/encoder" "$C/regress/encoder"
replay metadata "$C/corpus/metadata" "$C/regress/metadata"
replay serve "$C/corpus/serve" "$C/regress/serve"
replay shards "$C/corpus/shards" "$C/regress/shards"
replay sparse "$C/corpus/sparse" "$C/regress/sparse"
finish
