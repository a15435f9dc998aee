# Helpers for the shell tests. Sourced; expects TT_BUILDDIR, TT_SRCDIR, TT_DATA.
set -u
T="${TT_BUILDDIR:-.}/tartan"
SYNTH="${TT_BUILDDIR:-.}/tartan-synth"
PY=/usr/bin/python3
WORK=$(mktemp -d /tmp/tartan-sh-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
npass=0
nfail=0
ok() { npass=$((npass + 1)); echo "ok - $*"; }
bad() { nfail=$((nfail + 1)); echo "not ok - $*"; }
# expect_fail DESCRIPTION PATTERN CMD...: CMD must exit 1 and print PATTERN on stderr.
expect_fail() {
    desc=$1; pat=$2; shift 2
    "$@" >"$WORK/out" 2>"$WORK/err"; rc=$?
    if [ $rc -eq 1 ] && grep -q -- "$pat" "$WORK/err"; then
        ok "$desc"
    else
        bad "$desc (exit $rc, stderr: $(head -c 400 "$WORK/err"))"
    fi
}
expect_ok() {
    desc=$1; shift
    if "$@" >"$WORK/out" 2>"$WORK/err"; then ok "$desc"; else bad "$desc (exit $?, stderr: $(head -c 400 "$WORK/err"))"; fi
}
finish() {
    echo "$npass passed, $nfail failed"
    [ $nfail -eq 0 ]
    exit $?
}
have_numpy() { [ -x "$PY" ] && "$PY" -c 'import numpy' 2>/dev/null; }
