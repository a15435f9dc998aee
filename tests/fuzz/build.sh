#!/bin/sh
# Builds the libFuzzer targets with clang (called by `make fuzz`):
#   tests/fuzz/build.sh SRCDIR BUILDDIR OUTDIR
# The library sources are compiled once with ASan + UBSan and libFuzzer's coverage
# instrumentation (-fsanitize=fuzzer-no-link) into OUTDIR/obj; each tests/fuzz/fuzz_*.c
# is linked with -fsanitize=fuzzer into OUTDIR/fuzz_NAME. BUILDDIR supplies config.h.
# Environment: FUZZ_CC (default: clang, else clang-14), FUZZ_SAN (default
# address,undefined), JOBS (parallel compiles, default: nproc).
set -eu
if [ $# -ne 3 ]; then
    echo "usage: $0 SRCDIR BUILDDIR OUTDIR" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
bld=$(cd "$2" && pwd)
out=$3
mkdir -p "$out/obj"
out=$(cd "$out" && pwd)

cc=${FUZZ_CC:-}
if [ -z "$cc" ]; then
    for c in clang clang-14 clang-15 clang-16; do
        if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
    done
fi
if [ -z "$cc" ]; then
    echo "fuzz: clang not found (apt-get install clang)" >&2
    exit 1
fi
# libFuzzer's runtime ships separately on Debian 12 (libclang-rt-14-dev).
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' \
    >"$out/probe.c"
if ! "$cc" -fsanitize=fuzzer "$out/probe.c" -o "$out/probe" 2>"$out/probe.err"; then
    echo "fuzz: $cc cannot link -fsanitize=fuzzer (apt-get install libclang-rt-14-dev):" >&2
    cat "$out/probe.err" >&2
    exit 1
fi
rm -f "$out/probe" "$out/probe.c" "$out/probe.err"

san=${FUZZ_SAN:-address,undefined}
pc() { pkg-config "$@" 2>/dev/null || true; }
CFLAGS="-std=c11 -g -O1 -fno-omit-frame-pointer -fsanitize=$san -fno-sanitize-recover=undefined \
-Wall -Wextra -Wno-unused-parameter -include $bld/config.h -I$src/include -I$src/src -pthread \
$(pc --cflags openblas liburing libxxhash sqlite3)"
LIBS="$(pc --libs openblas) $(pc --libs liburing) $(pc --libs libxxhash) $(pc --libs sqlite3)"
[ -n "$(pc --libs openblas)" ] || LIBS="-lopenblas $LIBS"
[ -n "$(pc --libs liburing)" ] || LIBS="$LIBS -luring"
[ -n "$(pc --libs libxxhash)" ] || LIBS="$LIBS -lxxhash"
[ -n "$(pc --libs sqlite3)" ] || LIBS="$LIBS -lsqlite3"
LIBS="$LIBS -lm -pthread"
# tartan serve's request parser (fuzz_serve.c) is tool code: its sources and jansson.
SERVE_SRC="$src/tools/serve/request.c $src/tools/serve/buf.c"
JANSSON_CFLAGS=$(pc --cflags jansson)
JANSSON_LIBS=$(pc --libs jansson)
[ -n "$JANSSON_LIBS" ] || JANSSON_LIBS=-ljansson

jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
# Library + shared helper objects, rebuilt when a source or config.h is newer.
objs=""
todo=""
for f in "$src"/src/*/*.c "$src/tests/fuzz/fuzz_util.c"; do
    o="$out/obj/$(basename "$(dirname "$f")")_$(basename "$f" .c).o"
    objs="$objs $o"
    if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ "$bld/config.h" -nt "$o" ] ||
        [ -n "$(find "$src/src" "$src/include" -name '*.h' -newer "$o" 2>/dev/null | head -n 1)" ]; then
        todo="$todo $f"
    fi
done
if [ -n "$todo" ]; then
    echo "fuzz: compiling $(echo "$todo" | wc -w | tr -d ' ') sources with $cc -fsanitize=$san,fuzzer-no-link"
    # shellcheck disable=SC2086
    printf '%s\n' $todo | xargs -P "$jobs" -I{} sh -c \
        "$cc $CFLAGS -fsanitize=fuzzer-no-link -c {} -o \"$out/obj/\$(basename \$(dirname {}))_\$(basename {} .c).o\"" || exit 1
fi
for t in "$src"/tests/fuzz/fuzz_*.c; do
    name=$(basename "$t" .c)
    [ "$name" = fuzz_util ] && continue
    extra_src=""
    extra_libs=""
    if [ "$name" = fuzz_serve ]; then
        extra_src="$JANSSON_CFLAGS $SERVE_SRC"
        extra_libs=$JANSSON_LIBS
    fi
    # shellcheck disable=SC2086
    "$cc" $CFLAGS -fsanitize=fuzzer "$t" $extra_src $objs $LIBS $extra_libs -o "$out/$name"
    echo "fuzz: built $out/$name"
done
