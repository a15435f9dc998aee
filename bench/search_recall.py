"""Recall@k of a TREC run against a reference run (e.g. tartan's exhaustive search):
the mean over the reference's queries of |top-k(run) ∩ top-k(reference)| / k; with
--first, also the share of the reference's queries whose first document is in the
run's top k (what tartan tune calls "first kept").
usage: search_recall.py RUN REFERENCE [K] [--first]"""
import sys


def load(path, k):
    runs, first = {}, {}
    for line in open(path):
        q, _, d, rank, _score, _tag = line.split()
        if int(rank) <= k:
            runs.setdefault(q, set()).add(d)
        if int(rank) == 1:
            first[q] = d
    return runs, first


def main():
    args = [a for a in sys.argv[1:] if a != "--first"]
    k = int(args[2]) if len(args) > 2 else 10
    (run, _), (ref, ref_first) = load(args[0], k), load(args[1], k)
    total = sum(len(run.get(q, set()) & ref[q]) / min(k, len(ref[q])) for q in ref)
    if "--first" in sys.argv[1:]:
        kept = sum(ref_first.get(q) in run.get(q, set()) for q in ref)
        print("%.4f first kept %.4f" % (total / len(ref), kept / len(ref)))
    else:
        print("%.4f" % (total / len(ref)))


main()
