#!/usr/bin/env python3
"""Documents [D0, D1) of a tartan-synth collection (or any PREFIX.vectors.npy 2-D,
PREFIX.doclens.npy 1-D int64, PREFIX.ids.txt) as a collection of their own, without
numpy: OUT.vectors.npy, OUT.doclens.npy, OUT.ids.txt. With ID_PREFIX, ids 'docN'
become ID_PREFIX + 'N' (documents from another tartan-synth run then do not collide).
The store benchmark (bench/store_bench.sh) cuts one collection into a base and batches
to add with it.
usage: npy_docs.py PREFIX D0 D1 OUT [ID_PREFIX]"""
import ast
import struct
import sys


def header(f):
    magic = f.read(6)
    if magic != b"\x93NUMPY":
        sys.exit("not a .npy file: %s" % f.name)
    major = f.read(2)[0]
    hlen = struct.unpack("<H" if major == 1 else "<I", f.read(2 if major == 1 else 4))[0]
    d = ast.literal_eval(f.read(hlen).decode("latin1"))
    if d["fortran_order"]:
        sys.exit("%s: Fortran order" % f.name)
    return d, f.tell()


def write_header(f, descr, shape):
    sh = "(%d,)" % shape[0] if len(shape) == 1 else "(%s)" % ", ".join(map(str, shape))
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, sh)
    pad = 64 - (10 + len(d) + 1) % 64
    d = d + " " * (pad % 64) + "\n"
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode("latin1"))


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    prefix, d0, d1, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    idp = sys.argv[5] if len(sys.argv) == 6 else None
    with open(prefix + ".doclens.npy", "rb") as f:
        h, _ = header(f)
        if h["descr"] != "<i8":
            sys.exit("doclens must be int64")
        lens = struct.unpack("<%dq" % h["shape"][0], f.read(8 * h["shape"][0]))
    if not 0 <= d0 < d1 <= len(lens):
        sys.exit("documents %d..%d out of 0..%d" % (d0, d1, len(lens)))
    v0, v1 = sum(lens[:d0]), sum(lens[:d1])
    with open(prefix + ".vectors.npy", "rb") as f:
        h, off = header(f)
        dim = h["shape"][1]
        esz = int(h["descr"][2:])
        row = dim * esz
        with open(out + ".vectors.npy", "wb") as g:
            write_header(g, h["descr"], (v1 - v0, dim))
            f.seek(off + v0 * row)
            left = (v1 - v0) * row
            while left:
                b = f.read(min(left, 1 << 24))
                if not b:
                    sys.exit("%s: truncated" % f.name)
                g.write(b)
                left -= len(b)
    with open(out + ".doclens.npy", "wb") as g:
        write_header(g, "<i8", (d1 - d0,))
        g.write(struct.pack("<%dq" % (d1 - d0), *lens[d0:d1]))
    with open(prefix + ".ids.txt") as f, open(out + ".ids.txt", "w") as g:
        for i, line in enumerate(f):
            if d0 <= i < d1:
                g.write(idp + line[3:] if idp and line.startswith("doc") else line)


main()
