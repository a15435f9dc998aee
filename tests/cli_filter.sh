#!/bin/sh
# Filtered search from the command line (doc/metadata.md, doc/search.md "Filters"):
# build --metadata, info and verify; --where in every mode against a brute-force model
# at several selectivities; --filter-ids with unknown ids; a filter matching nothing;
# --json --with-metadata; bad metadata files (fewer/more lines, invalid JSON, mixed
# types) that leave nothing; SQL that tries to write or reach a file, refused with the
# index unchanged byte for byte; the metadata through add, delete and compact; a
# damaged metadata file caught by verify.
. "${TT_SRCDIR:-.}/tests/lib.sh"
[ -x "$PY" ] || { echo "python3 missing: skip"; exit 77; }
have_numpy || { echo "numpy missing: skip"; exit 77; }
BD=$(cd "${TT_BUILDDIR:-.}" && pwd)
T="$BD/tartan"
SYNTH="$BD/tartan-synth"
W="$WORK"

"$SYNTH" --out "$W/s" --docs 1200 --doclen 6-14 --dim 32 --queries 8 --qlen 6 --noise 0.15 \
    --qnoise 0.1 --seed 4 >/dev/null 2>&1 || { echo "synth failed"; exit 1; }
"$PY" - "$W" <<'PY'
import json, random, sys
w = sys.argv[1]
rng = random.Random(3)
ids = [l.strip() for l in open(w + "/s.ids.txt")]
with open(w + "/m.jsonl", "w") as f, open(w + "/bucket.txt", "w") as b:
    for i, d in enumerate(ids):
        k = rng.randrange(1000)
        b.write("%s %d\n" % (d, k))
        f.write(json.dumps({"bucket": k, "lang": ["en", "fr"][k % 2], "year": 1990 + k % 35,
                            "good": k % 3 == 0, "note": None if k % 4 else "a \"quote\""}) + "\n")
PY
expect_ok "build --metadata" "$T" build --vectors "$W/s.vectors.npy" --doclens "$W/s.doclens.npy" \
    --ids "$W/s.ids.txt" --out "$W/idx" --metadata "$W/m.jsonl" --centroids 64 --threads 2
"$T" info "$W/idx" >"$W/info" 2>&1
if grep -q "metadata     5 columns (SQLite; tartan search --where): bucket integer, lang text, year integer, good boolean, note text" "$W/info"; then
    ok "info lists the columns and types"; else bad "info: $(grep metadata "$W/info")"; fi
"$T" info --json "$W/idx" | "$PY" -c 'import json,sys; j=json.load(sys.stdin); assert [c["name"] for c in j["metadata"]] == ["bucket","lang","year","good","note"]' \
    && ok "info --json lists the columns" || bad "info --json metadata"
expect_ok "verify checks the metadata" "$T" verify "$W/idx"

# ---------------------------------------------------- filtered search vs brute force
# model: the allowed ids from bucket.txt; reference: the unfiltered exhaustive (or exact)
# ranking of every document, keeping the allowed ones; PLAID: recall@10 >= 0.95.
cmp_py='import sys
allowed = set(l.split()[0] for l in open(sys.argv[1]) if int(l.split()[1]) < int(sys.argv[2]))
def run(p):
    r = {}
    for l in open(p):
        q, _, d, rank, s, _ = l.split()
        r.setdefault(q, []).append((d, float(s)))
    return r
ref, got, exact = run(sys.argv[3]), run(sys.argv[4]), sys.argv[5] == "exact"
k = 10
rec = []
for q in ref:
    want = [x for x in ref[q] if x[0] in allowed][:k]
    g = got.get(q, [])
    assert all(d in allowed for d, s in g), "a result outside the filter"
    assert len(g) == min(k, len(want)), "%d results, want %d" % (len(g), len(want))
    if exact:
        for (d1, s1), (d2, s2) in zip(g, want):
            assert abs(s1 - s2) <= 1e-4 * max(1, abs(s2)), (q, d1, s1, d2, s2)
    wd = set(d for d, s in want)
    rec.append(len(wd & set(d for d, s in g)) / len(wd) if wd else 1.0)
r = sum(rec) / len(rec)
assert exact or r >= 0.95, "recall@10 %.3f" % r
'
for mode in exhaustive plaid; do
    "$T" search --index "$W/idx" --queries "$W/s.queries.npy" --mode exhaustive --k 1200 \
        --out "$W/all.run" 2>/dev/null
    for cut in 1 10 100 500 1000; do
        for plan in 1 1000000; do
            [ "$mode" = exhaustive ] && [ $plan = 1 ] && continue
            "$T" search --index "$W/idx" --queries "$W/s.queries.npy" --mode $mode --k 10 \
                --where "bucket < $cut" --filter-direct-max $plan --ndocs 512 --out "$W/f.run" 2>"$W/err"
            how=$([ $mode = exhaustive ] && echo exact || echo recall)
            if "$PY" -c "$cmp_py" "$W/bucket.txt" $cut "$W/all.run" "$W/f.run" $how 2>"$W/py"; then
                ok "$mode --where 'bucket < $cut' (direct max $plan) matches brute force"
            else
                bad "$mode --where 'bucket < $cut' (direct max $plan): $(tail -1 "$W/py") $(head -c 200 "$W/err")"
            fi
        done
    done
done

# The reference modes search all the queries in one pass with the filter too: the
# same run as query by query (--latency). (This index keeps no originals: exhaustive.)
for mode in exhaustive; do
    "$T" search --index "$W/idx" --queries "$W/s.queries.npy" --mode $mode --k 20 \
        --where "bucket < 300" --out "$W/p1.run" 2>"$W/err1"
    "$T" search --index "$W/idx" --queries "$W/s.queries.npy" --mode $mode --k 20 \
        --where "bucket < 300" --latency --out "$W/p2.run" 2>"$W/err2"
    if cmp -s "$W/p1.run" "$W/p2.run" && grep -q "passes over the index" "$W/err1" \
        && grep -q "p50" "$W/err2"; then ok "$mode --where: one pass == query by query"
    else bad "$mode --where: one pass and --latency differ: $(cat "$W/err1" "$W/err2")"; fi
done

# ------------------------------------------------------------------- ids, nothing
printf 'doc3\ndoc5\nnot-a-doc\ndoc5\nother\n\n' >"$W/ids.txt"
head -3 "$W/s.ids.txt" | tail -2 >"$W/ids.txt"; printf 'not-a-doc\nother\n' >>"$W/ids.txt"
"$T" search --index "$W/idx" --queries "$W/s.queries.npy" --filter-ids "$W/ids.txt" --out "$W/i.run" 2>"$W/err"
rc=$?
allowed=$(head -3 "$W/s.ids.txt" | tail -2 | sort | tr '\n' ' ')
gotids=$(awk '{print $3}' "$W/i.run" | sort -u | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$gotids" = "$allowed" ] && grep -q "2 of them name no live document" "$W/err" \
    && [ "$(wc -l <"$W/i.run")" -eq 16 ]; then ok "--filter-ids: only those ids, unknown ones counted"
else bad "--filter-ids (exit $rc, got '$gotids' want '$allowed'): $(cat "$W/err")"; fi
"$T" search --index "$W/idx" --queries "$W/s.queries.npy" --where "bucket < 0" --out "$W/n.run" 2>"$W/err"
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$W/n.run" ] && grep -q "matches no document" "$W/err"; then
    ok "a filter matching nothing: 0 results, exit 0, a note"; else bad "empty filter (exit $rc)"; fi

# ------------------------------------------------------------ --json --with-metadata
"$T" search --index "$W/idx" --queries "$W/s.queries.npy" --where "lang = 'fr' AND good" --json \
    --with-metadata --k 5 --out "$W/j.jsonl" 2>/dev/null
if "$PY" - "$W" <<'PY'
import json, sys
w = sys.argv[1]
meta = {}
ids = [l.strip() for l in open(w + "/s.ids.txt")]
for d, l in zip(ids, open(w + "/m.jsonl")):
    meta[d] = json.loads(l)
n = 0
for l in open(w + "/j.jsonl"):
    j = json.loads(l)
    for h in j["results"]:
        assert h["metadata"] == meta[h["docid"]], (h, meta[h["docid"]])
        assert h["metadata"]["lang"] == "fr" and h["metadata"]["good"] is True
        n += 1
assert n == 40
PY
then ok "--json --with-metadata carries each hit's metadata"; else bad "--with-metadata"; fi
"$T" search --index "$W/idx" --queries "$W/s.queries.npy" --with-metadata --out "$W/x.run" 2>"$W/err"
[ $? -eq 2 ] && grep -q "needs --jsonl" "$W/err" && ok "--with-metadata needs --json (usage error)" \
    || bad "--with-metadata without --json: $(cat "$W/err")"

# ----------------------------------------------------------------- hostile filters
snap() { (cd "$1" && ls -la --time-style=+%s . | awk '{print $5, $7}'; cksum *) ; }
snap "$W/idx" >"$W/snap.before"
ls "$W" | grep -v '^snap\.\|^err$' >"$W/snap.dir_before"
for expr in "1); DROP TABLE meta; --" "1); DELETE FROM meta; --" \
    "1) UNION SELECT 1; ATTACH '$W/evil.db' AS e; --" "load_extension('$W/evil.so')" \
    "1); PRAGMA user_version = 7; --" "(SELECT 1 FROM pragma_table_info('meta'))" \
    "1; SELECT 2" "(WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r) SELECT count(*) FROM r)" \
    "yeer > 3" "bucket >"; do
    "$T" search --index "$W/idx" --queries "$W/s.queries.npy" --where "$expr" --out "$W/h.run" 2>"$W/err"
    rc=$?
    if [ $rc -eq 1 ] && grep -q "filter '" "$W/err" && [ ! -e "$W/h.run" ]; then ok "refused: $expr"
    else bad "not refused (exit $rc): $expr: $(cat "$W/err")"; fi
done
"$T" search --index "$W/idx" --queries "$W/s.queries.npy" --where "yeer > 3" --out "$W/h.run" 2>"$W/err"
grep -q "no such column: yeer" "$W/err" && ok "unknown column named" || bad "unknown column: $(cat "$W/err")"
snap "$W/idx" >"$W/snap.after"
ls "$W" | grep -v '^snap\.\|^err$' >"$W/snap.dir_after"
if cmp -s "$W/snap.before" "$W/snap.after" && cmp -s "$W/snap.dir_before" "$W/snap.dir_after"; then
    ok "the index is byte for byte as it was, and no file appeared"
else bad "something changed: $(diff "$W/snap.before" "$W/snap.after") $(diff "$W/snap.dir_before" "$W/snap.dir_after")"; fi

# ---------------------------------------------------------------- bad metadata files
head -1199 "$W/m.jsonl" >"$W/short.jsonl"
{ cat "$W/m.jsonl"; echo '{"bucket": 1}'; } >"$W/long.jsonl"
{ head -5 "$W/m.jsonl"; echo '{"bucket": 1,}'; tail -1194 "$W/m.jsonl"; } >"$W/badjson.jsonl"
{ head -5 "$W/m.jsonl"; echo '{"bucket": "one"}'; tail -1194 "$W/m.jsonl"; } >"$W/mixed.jsonl"
for c in "short:1199 lines for 1200 documents" "long:long.jsonl:1201: more lines than the 1200" \
         "badjson:badjson.jsonl:6:" "mixed:mixed.jsonl:6: member 'bucket' is a text"; do
    f=${c%%:*}; pat=${c#*:}
    expect_fail "build refuses $f metadata ($pat)" "$pat" "$T" build --vectors "$W/s.vectors.npy" \
        --doclens "$W/s.doclens.npy" --ids "$W/s.ids.txt" --out "$W/bad" --metadata "$W/$f.jsonl" \
        --centroids 64
    [ -e "$W/bad" ] && bad "$f: something left at the output"
done

# (--where with --mode sparse and hybrid: tests/cli_hybrid.sh, whose index has BM25
# postings and metadata)

# ------------------------------------------------ sharded indexes
# A sharded build with --metadata gives each shard its documents' part (metadata.tt,
# rows renumbered, every column); --where over the top directory is each shard's --where
# at the global rows: in exhaustive mode the unsharded index's filtered run (up to float
# rounding of the scores), also with --filter-ids and --with-metadata.
expect_ok "build --shards 3 --metadata" "$T" build --vectors "$W/s.vectors.npy" \
    --doclens "$W/s.doclens.npy" --ids "$W/s.ids.txt" --out "$W/shm" --metadata "$W/m.jsonl" \
    --centroids 64 --shards 3
expect_ok "verify checks every shard's metadata" "$T" verify "$W/shm"
awk 'NR % 3 == 1' "$W/s.ids.txt" >"$W/third.ids"
for wh in "year > 2010" "lang = 'fr' AND good" "note IS NOT NULL OR bucket < 50"; do
    for f in shm idx; do
        "$T" search --index "$W/$f" --queries "$W/s.queries.npy" --mode exhaustive --k 20 \
            --where "$wh" --out "$W/$f.wrun" 2>/dev/null
        "$T" search --index "$W/$f" --queries "$W/s.queries.npy" --mode exhaustive --k 20 \
            --where "$wh" --filter-ids "$W/third.ids" --json --with-metadata \
            --out "$W/$f.wjrun" 2>/dev/null
    done
    # the same up to float rounding: a shard groups its documents otherwise, and the
    # sgemm may round a row by its place (tests/runs_close.py, doc/search.md)
    [ -s "$W/shm.wrun" ] && [ -s "$W/shm.wjrun" ] &&
        msg=$("$PY" "$TT_SRCDIR/tests/runs_close.py" "$W/shm.wrun" "$W/idx.wrun" 2>&1) &&
        msg=$("$PY" "$TT_SRCDIR/tests/runs_close.py" "$W/shm.wjrun" "$W/idx.wjrun" 2>&1) \
        && ok "sharded --where \"$wh\" (and with --filter-ids, --with-metadata): the unsharded run" \
        || bad "sharded --where \"$wh\" differs from the unsharded index's: ${msg:-}"
done
"$T" search --index "$W/shm/shard-0002" --queries "$W/s.queries.npy" --mode exhaustive \
    --where "year > 2010" --json --with-metadata --k 3 --out "$W/one.wj" 2>/dev/null
"$PY" - "$W" <<'PY' && ok "a shard alone: --where on its own metadata" || bad "a shard's --where"
import json, sys
w = sys.argv[1]
meta = {d: json.loads(l) for d, l in zip((l.strip() for l in open(w + "/s.ids.txt")), open(w + "/m.jsonl"))}
ids = [l.strip() for l in open(w + "/s.ids.txt")]
mine = set(ids[2 * 1200 // 3:])
n = 0
for line in open(w + "/one.wj"):
    for r in json.loads(line)["results"]:
        assert r["docid"] in mine and r["metadata"] == meta[r["docid"]], r
        assert r["metadata"]["year"] > 2010
        n += 1
assert n > 0
PY
expect_ok "build --shards 2 (no metadata)" "$T" build --vectors "$W/s.vectors.npy" \
    --doclens "$W/s.doclens.npy" --ids "$W/s.ids.txt" --out "$W/sh" --centroids 64 --shards 2
expect_fail "a sharded index without metadata refuses --where" "has no metadata" \
    "$T" search --index "$W/sh" --queries "$W/s.queries.npy" --out "$W/sh.run" --where "year > 0"
[ -e "$W/sh.run" ] && bad "sharded --where: a run appeared"
# --filter-ids on a sharded index: each shard searches its part of the global filter; in
# exhaustive mode the run is the unsharded index's with the same filter (same codebook),
# up to float rounding (sgemm may round a row by its place in a group, as above)
awk 'NR % 4 == 1' "$W/s.ids.txt" >"$W/sh.ids"; echo no-such-id >>"$W/sh.ids"
for f in sh idx; do
    "$T" search --index "$W/$f" --queries "$W/s.queries.npy" --mode exhaustive --k 10 \
        --filter-ids "$W/sh.ids" --out "$W/$f.frun" 2>"$W/$f.ferr"
done
"$PY" "$TT_SRCDIR/tests/runs_close.py" "$W/sh.frun" "$W/idx.frun" >/dev/null 2>&1 && [ -s "$W/sh.frun" ] \
    && [ -z "$(awk '{print $3}' "$W/sh.frun" | grep -v -x -F -f "$W/sh.ids")" ] \
    && grep -q "1 of them name no live" "$W/sh.ferr" \
    && ok "sharded --filter-ids: the unsharded index's filtered run, allowed ids only" \
    || bad "sharded --filter-ids differs ($(head -c 300 "$W/sh.ferr"))"

# ------------------------------------------------------- through add, delete, compact
"$PY" - "$W" <<'PY'
import numpy as np, sys
w = sys.argv[1]
v = np.load(w + "/s.vectors.npy"); d = np.load(w + "/s.doclens.npy")
n = int(d[:20].sum())
np.save(w + "/a.vectors.npy", v[:n]); np.save(w + "/a.doclens.npy", d[:20])
open(w + "/a.ids.txt", "w").write("".join("new%d\n" % i for i in range(20)))
open(w + "/a.jsonl", "w").write("".join('{"id": "new%d", "bucket": %d}\n' % (i, 5000 + i) for i in reversed(range(20))))
PY
expect_ok "add --metadata (keyed by id)" "$T" add --index "$W/idx" --vectors "$W/a.vectors.npy" \
    --doclens "$W/a.doclens.npy" --ids "$W/a.ids.txt" --metadata "$W/a.jsonl"
printf 'new3\nnew4\n' >"$W/del.txt"
expect_ok "delete" "$T" delete --index "$W/idx" --ids "$W/del.txt"
expect_ok "verify after add + delete" "$T" verify "$W/idx"
"$T" search --index "$W/idx" --queries "$W/s.queries.npy" --where "bucket >= 5000" --json \
    --with-metadata --k 50 --mode exhaustive --out "$W/a.jsonl.run" 2>/dev/null
chk_py='import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)["results"]
    assert len(r) == 18, len(r)
    for h in r:
        assert h["metadata"]["bucket"] == 5000 + int(h["docid"][3:]), h
        assert h["docid"] not in ("new3", "new4")'
"$PY" -c "$chk_py" "$W/a.jsonl.run" && ok "added rows carry their metadata; deleted ones gone" \
    || bad "metadata after add + delete"
expect_ok "compact" "$T" compact --index "$W/idx"
expect_ok "verify after compact" "$T" verify "$W/idx"
"$T" search --index "$W/idx" --queries "$W/s.queries.npy" --where "bucket >= 5000" --json \
    --with-metadata --k 50 --mode exhaustive --out "$W/c.jsonl.run" 2>/dev/null
"$PY" -c "$chk_py" "$W/c.jsonl.run" && ok "compaction renumbers the metadata with its rows" \
    || bad "metadata after compact"
ls "$W/idx" | grep -c metadata.tt | grep -qx 1 && ok "one metadata file after compaction" \
    || bad "metadata files: $(ls "$W/idx")"

# ------------------------------------------------------------ a damaged metadata file
mf=$(ls "$W/idx" | grep metadata.tt)
"$PY" -c "import sys; f = open(sys.argv[1], 'r+b'); f.seek(200); b = f.read(1); f.seek(200); f.write(bytes([b[0] ^ 0xff]))" "$W/idx/$mf"
expect_fail "verify names a damaged metadata file" "$mf" "$T" verify "$W/idx"
finish
