"""Recall@k of a TREC run against a reference run (e.g. tartan's exhaustive search):
the mean over the reference's queries of |top-k(run) ∩ top-k(reference)| / k.
usage: search_recall.py RUN REFERENCE [K]"""
import sys


def load(path, k):
    runs = {}
    for line in open(path):
        q, _, d, rank, _score, _tag = line.split()
        if int(rank) <= k:
            runs.setdefault(q, set()).add(d)
    return runs


def main():
    k = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    run, ref = load(sys.argv[1], k), load(sys.argv[2], k)
    total = sum(len(run.get(q, set()) & ref[q]) / min(k, len(ref[q])) for q in ref)
    print("%.4f" % (total / len(ref)))


main()
