"""Two runs with dense scores (TREC, or tartan search's JSON lines) are the same up to
float rounding: per query the same number of hits, the scores equal within 1e-5
(relative) rank by rank, and the same documents but for ties within that tolerance at
the cut; in JSON runs a document's other fields (metadata) are the same. Exits 1 naming
the first difference. Used by tests/cli_hybrid_shards.sh and tests/cli_filter.sh."""
import json
import sys


def load(path):
    """query -> [(doc, score)], and (query, doc) -> the hit's other JSON fields."""
    runs, rest = {}, {}
    for line in open(path):
        if line.startswith("{"):
            r = json.loads(line)
            for h in r["results"]:
                runs.setdefault(r["qid"], []).append((h["docid"], float(h["score"])))
                rest[r["qid"], h["docid"]] = {
                    k: v for k, v in h.items() if k not in ("rank", "score")}
        else:
            q, _, d, _, s, _ = line.split()
            runs.setdefault(q, []).append((d, float(s)))
    return runs, rest


def tol(x):
    return 1e-5 * (1 + abs(x))


def main(a_path, b_path):
    (a, ra), (b, rb) = load(a_path), load(b_path)
    if a.keys() != b.keys():
        return "queries differ"
    for key in ra.keys() & rb.keys():
        if ra[key] != rb[key]:
            return f"{key[0]}: {key[1]}: {ra[key]} against {rb[key]}"
    for q in a:
        x, y = a[q], b[q]
        if len(x) != len(y):
            return f"{q}: {len(x)} and {len(y)} hits"
        for i, ((d, s), (e, t)) in enumerate(zip(x, y)):
            if abs(s - t) > tol(s):
                return f"{q} rank {i + 1}: {d} {s} against {e} {t}"
        cut, xs, ys = x[-1][1], dict(x), dict(y)
        for d in xs.keys() ^ ys.keys():
            s = xs.get(d, ys.get(d))
            if abs(s - cut) > tol(cut):
                return f"{q}: {d} ({s}) in one run only, not tied at the cut"
    return None


if __name__ == "__main__":
    err = main(sys.argv[1], sys.argv[2])
    if err:
        print(err)
        sys.exit(1)
