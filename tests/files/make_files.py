#!/usr/bin/python3
"""Writes the seed corpus of good / bad / unsupported reader inputs used by
tests/test_npy.c (and, later, as fuzzer seeds). Deterministic: re-running it
produces byte-identical files. Run from anywhere: /usr/bin/python3 make_files.py

Every vector file that opens holds the same 6 x 4 matrix  X[i][j] = (4*i + j - 11) / 8,
values exactly representable in float16 and bfloat16, so all formats decode to the
same floats. The doclens [2, 1, 3] split those 6 rows into 3 documents."""
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
X = ((np.arange(24, dtype=np.float32) - 11) / 8).reshape(6, 4)


def path(sub, name):
    d = os.path.join(HERE, sub)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def save(sub, name, arr, version=None):
    with open(path(sub, name), "wb") as f:
        np.lib.format.write_array(f, arr, version=version, allow_pickle=False)


def raw_npy(sub, name, header, data=b"", major=1, hlen=None, magic=b"\x93NUMPY"):
    """A .npy with a hand-written header text, padded to 64 bytes like numpy."""
    text = header.encode("utf-8")
    pre = 10 if major == 1 else 12
    total = -(-(pre + len(text) + 1) // 64) * 64
    text = text + b" " * (total - pre - len(text) - 1) + b"\n"
    n = len(text) if hlen is None else hlen
    lenfield = struct.pack("<H", n) if major == 1 else struct.pack("<I", n)
    with open(path(sub, name), "wb") as f:
        f.write(magic + bytes([major, 0]) + lenfield + text + data)


def write_bytes(sub, name, b):
    with open(path(sub, name), "wb") as f:
        f.write(b)


def fvecs(arr, dims=None):
    out = b""
    for i, row in enumerate(arr):
        d = len(row) if dims is None else dims[i]
        out += struct.pack("<i", d) + row.astype("<f4").tobytes()
    return out


def bf16_bits(a):
    u = a.astype("<f4").view("<u4").astype(np.uint64)
    # round to nearest even on the 16 dropped bits
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


DATA = X.astype("<f4").tobytes()
F4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4), }"

# ------------------------------------------------------------------ good
save("good", "vec_f32_v1.npy", X, (1, 0))
save("good", "vec_f32_v2.npy", X, (2, 0))
save("good", "vec_f32_v3.npy", X, (3, 0))
save("good", "vec_f16.npy", X.astype("<f2"))
save("good", "vec_f64.npy", X.astype("<f8"))          # narrowed to float32 on read
save("good", "vec_bf16.npy", bf16_bits(X))          # '<u2': bfloat16 only with the flag
write_bytes("good", "vec.fvecs", fvecs(X))
# keys in another order, double quotes, odd spacing, Python-2 'L' suffixes, no
# trailing comma
raw_npy("good", "vec_spacing.npy",
        '{"shape":( 6L ,4L ) ,  "fortran_order" :False,"descr":"<f4"}', DATA)
raw_npy("good", "vec_spacing_v2.npy",
        "{ 'descr' : '<f4' ,\t'shape' : (6,4,), 'fortran_order': False ,}", DATA, major=2)
save("good", "doclens_i64.npy", np.array([2, 1, 3], dtype="<i8"))
save("good", "doclens_i32.npy", np.array([2, 1, 3], dtype="<i4"))
save("good", "doclens_col.npy", np.array([[2], [1], [3]], dtype="<i4"))
# every other integer dtype NumPy writes ('|i1' and '|u1' for the 1-byte ones)
for t in ("i1", "u1", "i2", "u2", "u4", "u8"):
    save("good", "doclens_%s%d.npy" % (t[0], 8 * int(t[1])), np.array([2, 1, 3], dtype="<" + t))
save("good", "scalar.npy", np.array(1.5, dtype="<f4"))  # shape ()
save("good", "queries_3d.npy", X.reshape(2, 3, 4))       # [nq, Kq, dim]
# a 1-D array with fortran_order True is the same bytes as C order
raw_npy("good", "fortran_1d.npy",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (24,), }", DATA)
with open(path("good", "ids.txt"), "w", newline="") as f:
    f.write("".join("doc-%d\n" % i for i in range(6)))
with open(path("good", "ids_crlf.txt"), "w", newline="") as f:
    f.write("\r\n".join("doc-%d" % i for i in range(6)))  # no final newline

# ------------------------------------------------------------------- bad
raw_npy("bad", "magic.npy", F4, DATA, magic=b"\x93NUMPZ")
raw_npy("bad", "version.npy", F4, DATA, major=4)
with open(path("good", "vec_f32_v1.npy"), "rb") as f:
    good = f.read()
write_bytes("bad", "trunc_preamble.npy", good[:9])
write_bytes("bad", "trunc_header.npy", good[:40])
write_bytes("bad", "trunc_data.npy", good[:-5])
raw_npy("bad", "hlen.npy", F4, DATA, hlen=0xFFFF)
raw_npy("bad", "missing_shape.npy", "{'descr': '<f4', 'fortran_order': False, }", DATA)
raw_npy("bad", "missing_descr.npy", "{'fortran_order': False, 'shape': (6, 4), }", DATA)
raw_npy("bad", "shape_str.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': '6,4', }",
        DATA)
raw_npy("bad", "shape_negative.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-6, 4), }", DATA)
raw_npy("bad", "shape_overflow.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", DATA)
raw_npy("bad", "shape_huge_digit.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, 4), }",
        DATA)
raw_npy("bad", "shape_not_tuple.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (24), }", DATA)
raw_npy("bad", "shape_unclosed.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4, }", DATA)
raw_npy("bad", "nondict.npy", "[('descr', '<f4'), ('shape', (6, 4))]", DATA)
raw_npy("bad", "dup_key.npy",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6, 4), }", DATA)
raw_npy("bad", "unknown_key.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4), 'x': 1, }", DATA)
raw_npy("bad", "trailing.npy", F4 + " junk", DATA)
raw_npy("bad", "fortran_value.npy", "{'descr': '<f4', 'fortran_order': 0, 'shape': (6, 4), }",
        DATA)
raw_npy("bad", "unterminated.npy", "{'descr': '<f4, 'fortran_order': False, 'shape': (6, 4)}",
        DATA)
save("bad", "vec_1d.npy", X.reshape(24))
save("bad", "vec_3d.npy", X.reshape(2, 3, 4))
save("bad", "vec_rows0.npy", np.zeros((0, 4), dtype="<f4"))
save("bad", "vec_dim0.npy", np.zeros((6, 0), dtype="<f4"))
write_bytes("bad", "size.fvecs", fvecs(X) + b"\0")
write_bytes("bad", "prefix.fvecs", fvecs(X, dims=[4, 4, 4, 5, 4, 4]))
write_bytes("bad", "dim0.fvecs", struct.pack("<i", 0) * 4)
save("bad", "vec_dim8.npy", np.zeros((6, 8), dtype="<f4") + 0.5)  # dim mismatch with 4
save("bad", "doclens_zero.npy", np.array([2, 0, 4], dtype="<i8"))
save("bad", "doclens_negative.npy", np.array([3, -1, 4], dtype="<i8"))
save("bad", "doclens_big.npy", np.array([2, 2**31 + 1, 3], dtype="<i8"))
save("bad", "doclens_sum.npy", np.array([2, 1, 2], dtype="<i8"))
save("bad", "doclens_2col.npy", np.array([[2, 1], [3, 0]], dtype="<i4"))
with open(path("bad", "ids_empty_line.txt"), "w", newline="") as f:
    f.write("doc-0\ndoc-1\n\ndoc-3\ndoc-4\ndoc-5\n")
with open(path("bad", "ids_long.txt"), "w", newline="") as f:
    f.write("doc-0\n" + "x" * 1025 + "\ndoc-2\n")
with open(path("bad", "ids_short.txt"), "w", newline="") as f:
    f.write("".join("doc-%d\n" % i for i in range(5)))
with open(path("bad", "ids_extra.txt"), "w", newline="") as f:
    f.write("".join("doc-%d\n" % i for i in range(9)))

# ----------------------------------------------------------- unsupported
save("unsupported", "big_endian.npy", X.astype(">f4"))
save("unsupported", "fortran.npy", np.asfortranarray(X))
save("unsupported", "u1.npy", np.arange(24, dtype=np.uint8).reshape(6, 4))
save("unsupported", "c8.npy", X.astype("<c8"))
save("unsupported", "i4.npy", np.arange(24, dtype="<i4").reshape(6, 4))
save("unsupported", "structured.npy", np.zeros(3, dtype=[("a", "<f4"), ("b", "<f4")]))
save("unsupported", "4d.npy", X.reshape(1, 2, 3, 4))
save("unsupported", "doclens_f4.npy", np.array([2, 1, 3], dtype="<f4"))
