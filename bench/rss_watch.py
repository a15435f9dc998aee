#!/usr/bin/env python3
"""Runs a command and reports its peak memory, split by kind: the kernel's peak resident
set (ru_maxrss, what /usr/bin/time -v calls "Maximum resident set size", which counts
file pages mapped by the process as well as its own memory) and the peaks of RssAnon
(heap, stacks: memory the process holds) and RssFile (pages of mapped files, which the
page cache can drop) sampled from /proc/PID/status every 10 ms. Prints one line on
stderr after the command's own output:
  rss: wall S s, user U s, maxrss M MiB, peak anon A MiB, peak file F MiB
usage: rss_watch.py CMD [ARG...]; exit status: the command's."""
import os
import subprocess
import sys
import time


def sample(pid, peak):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("RssAnon", "RssFile"):
                    peak[k] = max(peak[k], int(v.split()[0]))
    except OSError:
        pass


def main():
    t0 = time.time()
    p = subprocess.Popen(sys.argv[1:])
    peak = {"RssAnon": 0, "RssFile": 0}
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        sample(p.pid, peak)
        time.sleep(0.01)
    sys.stderr.write("rss: wall %.2f s, user %.2f s, maxrss %.0f MiB, peak anon %.0f MiB, "
                     "peak file %.0f MiB\n" % (time.time() - t0, ru.ru_utime, ru.ru_maxrss / 1024,
                                               peak["RssAnon"] / 1024, peak["RssFile"] / 1024))
    sys.exit(os.waitstatus_to_exitcode(status))


main()
