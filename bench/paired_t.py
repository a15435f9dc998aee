#!/usr/bin/python3
"""Paired two-sided t-test of one metric between two runs, over the same queries:
reads the output of `tartan eval --per-query -c --metrics M` for each run (so judged
queries missing from a run count 0, as `tartan report` counts them) and prints both
means, the mean difference (B - A), t and p (Student t, n - 1 degrees of freedom).

  tartan eval --qrels Q --run A.run --metrics nDCG@10 --per-query -c > A.pq
  tartan eval --qrels Q --run B.run --metrics nDCG@10 --per-query -c > B.pq
  /usr/bin/python3 bench/paired_t.py A.pq B.pq
"""
import math
import sys


def load(path):
    vals = {}
    for line in open(path):
        f = line.split()
        if len(f) == 2 and f[0] not in ('query', 'all'):
            try:
                vals[f[0]] = float(f[1])
            except ValueError:
                pass
    return vals


def betacf(a, b, x):  # continued fraction of the incomplete beta (Numerical Recipes 6.4)
    c, d = 1.0, 1.0 / (1.0 - (a + b) * x / (a + 1))
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((a - 1 + m2) * (a + m2))
        d = 1.0 / (1.0 + aa * d)
        c = 1.0 + aa / c
        h *= d * c
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1 + m2))
        d = 1.0 / (1.0 + aa * d)
        c = 1.0 + aa / c
        h *= d * c
    return h


def ibeta(a, b, x):
    bt = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) +
                  b * math.log(1 - x))
    if x < (a + 1) / (a + b + 2):
        return bt * betacf(a, b, x) / a
    return 1 - bt * betacf(b, a, 1 - x) / b


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    if set(a) != set(b) or len(a) < 2:
        sys.exit('paired_t: the two files must list the same queries (%d, %d)' % (len(a), len(b)))
    d = [b[q] - a[q] for q in sorted(a)]
    n = len(d)
    m = sum(d) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1))
    t = m / (sd / math.sqrt(n)) if sd > 0 else 0.0
    p = ibeta((n - 1) / 2, 0.5, (n - 1) / (n - 1 + t * t)) if t else 1.0
    print('n %d  A %.4f  B %.4f  B-A %+.4f  t %.3f  p %.4f'
          % (n, sum(a.values()) / n, sum(b.values()) / n, m, t, p))


if __name__ == '__main__':
    main()
