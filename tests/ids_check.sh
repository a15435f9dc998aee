#!/bin/sh
# Regression tests (group B9): identifiers that tartan must refuse instead of writing
# them into an index or a run. Document ids with whitespace, control characters or
# invalid UTF-8, duplicate document ids (--ids and a BEIR corpus through --encoder),
# duplicate query ids (--query-ids and queries.jsonl through --encoder), an ids file
# ending in a blank line (accepted), run lines with other than 6 fields in `tartan eval`,
# and run tags that would break the 6-field line. Errors exit 1, usage errors exit 2.
. "${TT_SRCDIR:-.}/tests/lib.sh"
have_numpy || { echo "numpy missing: skip"; exit 77; }
HASH="${TT_BUILDDIR:-.}/tartan-hash-encoder"
# Every tartan call is bounded, so a regression cannot hang the suite.
tt() { timeout 60 "$T" "$@"; }
# line_re N: how a message may cite line N of a file ("line N" or "FILE:N:").
line_re() { echo "line $1([^0-9]|\$)|:$1:"; }
# check DESC: the last command (run by run_err) exited 1 and its stderr matches every
# extended regular expression given (case-insensitive).
run_err() { "$@" >"$WORK/out" 2>"$WORK/err"; rc=$?; }
check() {
    desc=$1; shift
    if [ "$rc" -ne 1 ]; then
        bad "$desc (exit $rc, want 1; stderr: $(head -c 300 "$WORK/err"))"
        return
    fi
    for re in "$@"; do
        if ! grep -Eqi -- "$re" "$WORK/err"; then
            bad "$desc (stderr lacks /$re/: $(head -c 300 "$WORK/err"))"
            return
        fi
    done
    ok "$desc"
}
no_index() { # no index (nor a temporary directory) left by a refused build
    [ ! -e "$1" ] && ! ls -d "$1".tmp-* >/dev/null 2>&1
}

"$SYNTH" --out "$WORK/c" --docs 400 --doclen 5-15 --dim 32 --queries 10 --qlen 4 2>/dev/null \
    || { echo "tartan-synth failed"; exit 1; }
V="$WORK/c.vectors.npy"; L="$WORK/c.doclens.npy"; Q="$WORK/c.queries.npy"
b() { tt build --vectors "$V" --doclens "$L" --centroids 16 --threads 2 "$@"; }

# ---------------------------------------------------------------- B9a-d: bad ids
# Line 3 of a 400-line ids file replaced by the bad id (printf interprets the escapes).
bad_ids() { # NAME PRINTF-FORMAT
    { sed -n 1,2p "$WORK/c.ids.txt"; printf "$2\n"; sed -n '4,$p' "$WORK/c.ids.txt"; } >"$WORK/$1"
}
bad_ids space.ids 'has space'
bad_ids tab.ids 'has\ttab'
bad_ids ctrl.ids 'ctl\001char'
bad_ids utf8.ids 'bad\377\376utf8'
[ "$(wc -l <"$WORK/utf8.ids")" -eq 400 ] && [ "$(sed -n 3p "$WORK/tab.ids" | od -An -c | grep -c '\\t')" -eq 1 ] \
    || { echo "could not make the bad ids files"; exit 1; }

run_err b --ids "$WORK/space.ids" --out "$WORK/i_space"
check "B9a id with a space: exit 1, names the file, line 3, whitespace" \
    "space\.ids" "$(line_re 3)" "whitespace"
no_index "$WORK/i_space" && ok "B9a no index left" || bad "B9a an index was written with a space in an id"

run_err b --ids "$WORK/tab.ids" --out "$WORK/i_tab"
check "B9b id with a tab: exit 1, names the file, line 3, whitespace" \
    "tab\.ids" "$(line_re 3)" "whitespace"

run_err b --ids "$WORK/ctrl.ids" --out "$WORK/i_ctrl"
check "B9c id with a control character (0x01): exit 1, names the file, line 3" \
    "ctrl\.ids" "$(line_re 3)"

run_err b --ids "$WORK/utf8.ids" --out "$WORK/i_utf8"
check "B9d id that is not UTF-8 (bytes ff fe): exit 1, names the file, line 3, UTF-8" \
    "utf8\.ids" "$(line_re 3)" "UTF-8"

# ---------------------------------------------------------------- B9e: duplicate doc ids
awk 'NR == 2 || NR == 7 { print "dupid"; next } { print }' "$WORK/c.ids.txt" >"$WORK/dup.ids"
run_err b --ids "$WORK/dup.ids" --out "$WORK/i_dup"
check "B9e duplicate document id in --ids: exit 1, duplicate, the id, line 7" \
    "duplicate" "dupid" "$(line_re 7)"
no_index "$WORK/i_dup" && ok "B9e no index left" || bad "B9e an index was written with duplicate ids"

# ---------------------------------------------------------------- B9f/B9g: through the encoder
# A small deterministic BEIR corpus (40 documents, about 300 token vectors).
"$PY" - "$WORK" <<'PYEOF'
import json, random, sys
w = sys.argv[1]
rng = random.Random(7)
vocab = ("shock wave supersonic flow boundary layer plate heat transfer laminar turbulent "
         "wing flutter transonic speed pressure gradient nozzle jet mixing cylinder wake "
         "vortex shedding airfoil lift drag stall compressor blade cascade panel buckling "
         "shell vibration mach number reynolds separation reattachment cavity hypersonic "
         "ablation stagnation point skin friction").split()
def text(n):
    return " ".join(rng.choice(vocab) for _ in range(n))
docs = [{"_id": "doc%d" % i, "title": text(2), "text": text(8)} for i in range(40)]
with open(w + "/corpus.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps(d) + "\n")
with open(w + "/corpus_dup.jsonl", "w") as f:
    for i, d in enumerate(docs):
        if i == 25:
            d = dict(d, _id="doc11")  # the id of document 11 again
        f.write(json.dumps(d) + "\n")
qs = [{"_id": "q%d" % i, "text": text(3)} for i in range(6)]
with open(w + "/queries.jsonl", "w") as f:
    for q in qs:
        f.write(json.dumps(q) + "\n")
with open(w + "/queries_dup.jsonl", "w") as f:
    for i, q in enumerate(qs):
        f.write(json.dumps(dict(q, _id="q1") if i == 4 else q) + "\n")
PYEOF
E="$HASH --dim 32"
run_err tt build --encoder "$E" --encoder-timeout 30 --corpus "$WORK/corpus_dup.jsonl" \
    --out "$WORK/e_dup" --centroids 16 --threads 2
check "B9f corpus.jsonl with a repeated _id through build --encoder: exit 1, duplicate, the id" \
    "duplicate" "doc11"
no_index "$WORK/e_dup" && ok "B9f no index left" || bad "B9f an index was written with duplicate ids"

expect_ok "B9 setup: build --encoder over a corpus without duplicates" tt build --encoder "$E" \
    --encoder-timeout 30 --corpus "$WORK/corpus.jsonl" --out "$WORK/e" --centroids 16 --threads 2
expect_ok "B9 setup: search --encoder with distinct query ids" tt search --index "$WORK/e" \
    --encoder "$E" --encoder-timeout 30 --queries "$WORK/queries.jsonl" --out "$WORK/e.run"
run_err tt search --index "$WORK/e" --encoder "$E" --encoder-timeout 30 \
    --queries "$WORK/queries_dup.jsonl" --out "$WORK/e_dup.run"
check "B9g queries.jsonl with a repeated _id through search --encoder: exit 1, duplicate" "duplicate"
[ ! -e "$WORK/e_dup.run" ] && ok "B9g no run left (--encoder)" || bad "B9g a run was written with duplicate query ids (--encoder)"

expect_ok "B9 setup: build from vectors" b --ids "$WORK/c.ids.txt" --out "$WORK/idx"
awk 'NR == 4 { print "q1"; next } { print }' "$WORK/c.qids.txt" >"$WORK/dup.qids"
run_err tt search --index "$WORK/idx" --queries "$Q" --query-ids "$WORK/dup.qids" --out "$WORK/dup.run"
check "B9g duplicate query id in --query-ids: exit 1, duplicate" "duplicate"
[ ! -e "$WORK/dup.run" ] && ok "B9g no run left (--query-ids)" || bad "B9g a run was written with duplicate query ids"

# ---------------------------------------------------------------- B9h: trailing blank line
{ cat "$WORK/c.ids.txt"; echo; } >"$WORK/blank.ids"
[ "$(tail -c 2 "$WORK/blank.ids" | od -An -c | tr -d ' ')" = '\n\n' ] || { echo "bad blank.ids"; exit 1; }
expect_ok "B9h ids file ending in a blank line is accepted" b --ids "$WORK/blank.ids" --out "$WORK/i_blank"
if tt info --json "$WORK/i_blank" >"$WORK/info.json" 2>/dev/null &&
    "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['num_docs'] == 400, j['num_docs']" \
        "$WORK/info.json" 2>/dev/null; then
    ok "B9h the index has 400 documents"
else
    bad "B9h the index has 400 documents ($(head -c 200 "$WORK/info.json" 2>/dev/null))"
fi

# ---------------------------------------------------------------- B9i: run lines of 6 fields
printf 'q1 0 d1 1\nq1 0 d2 0\nq1 0 d3 1\n' >"$WORK/e.qrels"
printf 'q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.8 t\n' >"$WORK/six.run"
expect_ok "B9i setup: a well-formed run evaluates" tt eval --qrels "$WORK/e.qrels" --run "$WORK/six.run"
printf 'q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.8 t\nq1 Q0 d3 3 0.5 tag extra\n' >"$WORK/seven.run"
run_err tt eval --qrels "$WORK/e.qrels" --run "$WORK/seven.run"
check "B9i run line with 7 fields: exit 1, names the file and line 3" "seven\.run" ":3([^0-9]|\$)|line 3([^0-9]|\$)"
printf 'q1 Q0 d1 1 0.9 t\nq1 Q0 d2 2 0.8 t\nq1 Q0 d3 3 0.5\n' >"$WORK/five.run"
run_err tt eval --qrels "$WORK/e.qrels" --run "$WORK/five.run"
check "B9i run line with 5 fields: exit 1, names the file and line 3" "five\.run" ":3([^0-9]|\$)|line 3([^0-9]|\$)"

# ---------------------------------------------------------------- B9j: run tags
tt search --index "$WORK/idx" --queries "$Q" --tag "" --out "$WORK/tag1.run" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok "B9j --tag \"\" is a usage error (exit 2)" || bad "B9j --tag \"\": exit $rc, want 2"
tt search --index "$WORK/idx" --queries "$Q" --tag "a b" --out "$WORK/tag2.run" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok "B9j --tag \"a b\" is a usage error (exit 2)" || bad "B9j --tag \"a b\": exit $rc, want 2"
finish
