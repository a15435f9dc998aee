"""The tartan encoder protocol, versions 1 and 2 (doc/encoder-protocol.md), for Python
encoders. Version 2 adds a sparse part (term -> weight) to every reply: pass
serve(..., sparse=True) and let encode_batch return (vectors, {term: weight}) pairs.

An encoder built on this module only supplies a function that turns a batch of texts into
a list of [n_i, dim] arrays; serve() does the rest:

    import tartan_protocol as tp

    def encode(texts):                       # list[str] -> list of [n_i, dim] arrays
        ...

    args = tp.argument_parser("my encoder").parse_args()   # has --mode
    tp.serve(encode, dim=128, description="my-encoder v1", batch_size=32)

serve() writes the hello line, reads records in batches of up to batch_size (or until
end of input: tartan never waits for a reply before sending the next record, so a
blocking batch read cannot deadlock), writes one reply per record in order, flushes after
every batch, and ends with the DONE marker. It redirects sys.stdout to sys.stderr first,
so that a stray print() from a library cannot corrupt the binary stream. Only numpy is
needed (torch tensors are accepted and converted).
"""

import argparse
import struct
import sys

VERSION = 1
MAGIC = b"TARTAN-ENCODER"
TAG_VECS = b"VECS"
TAG_DONE = b"DONE"
TAG_SPRS = b"SPRS"
MAX_TERMS = 65536
MAX_TERM = 256
MAX_ID = 4096
MAX_TEXT = 64 << 20
MAX_DIM = 65536
MAX_VECTORS = 1 << 20


class ProtocolError(Exception):
    """The input stream broke the protocol, or an encoder result is unusable."""


def argument_parser(description):
    """An argparse parser with the --mode argument tartan always appends."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--mode", choices=("passage", "query"), required=True,
                   help="appended by tartan: what the records are")
    return p


def _read_exact(stream, n):
    chunks = []
    left = n
    while left:
        b = stream.read(left)
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def read_record(stream):
    """The next (id: bytes, text: str) from a binary stream, or None at a clean EOF."""
    head = _read_exact(stream, 4)
    if not head:
        return None
    if len(head) < 4:
        raise ProtocolError("input ends inside a record header")
    (id_len,) = struct.unpack("<I", head)
    if not 1 <= id_len <= MAX_ID:
        raise ProtocolError("record id length %d out of range" % id_len)
    rid = _read_exact(stream, id_len)
    tl = _read_exact(stream, 4)
    if len(rid) != id_len or len(tl) != 4:
        raise ProtocolError("input ends inside a record")
    (text_len,) = struct.unpack("<I", tl)
    if text_len > MAX_TEXT:
        raise ProtocolError("record text length %d too large" % text_len)
    text = _read_exact(stream, text_len)
    if len(text) != text_len:
        raise ProtocolError("input ends inside record %r" % rid)
    return rid, text.decode("utf-8", errors="replace")


def read_batch(stream, batch_size):
    """Up to batch_size records; fewer only at end of input (then the last batch)."""
    batch = []
    while len(batch) < batch_size:
        rec = read_record(stream)
        if rec is None:
            break
        batch.append(rec)
    return batch


def hello_line(dim, dtype="f32", max_vectors=0, description="", version=VERSION):
    if not 1 <= dim <= MAX_DIM:
        raise ValueError("dim must be 1..%d" % MAX_DIM)
    if dtype not in ("f32", "f16"):
        raise ValueError("dtype must be f32 or f16")
    if not 0 <= max_vectors <= MAX_VECTORS:
        raise ValueError("max_vectors must be 0..%d" % MAX_VECTORS)
    desc = " ".join(str(description).split())  # no control characters or newlines
    if version not in (1, 2):
        raise ValueError("protocol version must be 1 or 2")
    return b"%s %d %d %s %d %s\n" % (MAGIC, version, dim, dtype.encode(), max_vectors,
                                     desc.encode("utf-8"))


def sparse_bytes(rid, terms):
    """The sparse part (protocol 2) of record rid: terms maps str -> weight (finite,
    >= 0; zeros are sent and dropped by tartan), each term 1..256 bytes of UTF-8."""
    import math
    if len(terms) > MAX_TERMS:
        raise ProtocolError("record %r: %d sparse terms, more than %d" % (rid, len(terms), MAX_TERMS))
    parts = [TAG_SPRS, struct.pack("<I", len(terms))]
    for t, w in terms.items():
        b = t.encode("utf-8") if isinstance(t, str) else bytes(t)
        w = float(w)
        if not 1 <= len(b) <= MAX_TERM:
            raise ProtocolError("record %r: sparse term %r is not 1..%d bytes" % (rid, t, MAX_TERM))
        if not math.isfinite(w) or w < 0:
            raise ProtocolError("record %r: sparse term %r has weight %r (finite, >= 0)" % (rid, t, w))
        parts += [struct.pack("<I", len(b)), b, struct.pack("<f", w)]
    return b"".join(parts)


def _as_array(vectors):
    import numpy as np
    if hasattr(vectors, "detach"):  # a torch tensor
        vectors = vectors.detach().float().cpu().numpy()
    return np.asarray(vectors, dtype=np.float32)


def reply_bytes(rid, vectors, dim, dtype="f32", max_vectors=0):
    """One reply frame for record id rid (bytes) with vectors of shape [n, dim]."""
    import numpy as np
    a = _as_array(vectors)
    if a.ndim == 1 and a.size == dim:
        a = a.reshape(1, dim)
    if a.ndim != 2 or a.shape[1] != dim:
        raise ProtocolError("record %r: vectors of shape %s, expected [n, %d]"
                            % (rid, tuple(a.shape), dim))
    n = a.shape[0]
    if max_vectors and n > max_vectors:
        raise ProtocolError("record %r: %d vectors, more than max_vectors %d"
                            % (rid, n, max_vectors))
    if not np.isfinite(a).all():
        raise ProtocolError("record %r: NaN or Inf in its vectors" % (rid,))
    if dtype == "f16" and a.size and np.abs(a).max() > 65504.0:
        raise ProtocolError("record %r: values overflow float16; use f32" % (rid,))
    data = a.astype("<f4" if dtype == "f32" else "<f2")
    return b"".join((TAG_VECS, struct.pack("<I", len(rid)), rid, struct.pack("<I", n),
                     data.tobytes()))


def done_bytes(count):
    return TAG_DONE + struct.pack("<Q", count)


def serve(encode_batch, dim, dtype="f32", max_vectors=0, description="", batch_size=32,
          stdin=None, stdout=None, sparse=False):
    """Runs one protocol session; returns the number of records answered.

    encode_batch(texts) gets a list of str and returns a list (same length) of
    [n_i, dim] arrays or tensors; with sparse=True (protocol 2) a list of
    (vectors, {term: weight}) pairs. stdin/stdout default to the process's binary
    streams.
    """
    if stdout is None:
        stdout = sys.stdout.buffer
        sys.stdout = sys.stderr  # stray prints must not reach the protocol stream
    if stdin is None:
        stdin = sys.stdin.buffer
    stdout.write(hello_line(dim, dtype, max_vectors, description, 2 if sparse else 1))
    stdout.flush()
    count = 0
    while True:
        batch = read_batch(stdin, batch_size)
        if batch:
            results = encode_batch([text for _, text in batch])
            if len(results) != len(batch):
                raise ProtocolError("encode_batch returned %d results for %d texts"
                                    % (len(results), len(batch)))
            for (rid, _), res in zip(batch, results):
                if sparse:
                    vecs, terms = res
                    stdout.write(reply_bytes(rid, vecs, dim, dtype, max_vectors))
                    stdout.write(sparse_bytes(rid, terms))
                else:
                    stdout.write(reply_bytes(rid, res, dim, dtype, max_vectors))
                count += 1
            stdout.flush()
        if len(batch) < batch_size:
            break
    stdout.write(done_bytes(count))
    stdout.flush()
    return count


def main_guard(fn):
    """Runs fn(); reports an exception on stderr and exits with status 1 (tartan shows
    the stderr tail), so the traceback's last line names the problem."""
    try:
        fn()
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)  # tartan went away; nothing to report to
    except Exception as e:  # noqa: BLE001 - the message is the point
        import traceback
        traceback.print_exc(file=sys.stderr)
        print("encoder failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)


def l2_normalize_rows(a, eps=1e-12):
    """Rows divided by their L2 norm (numpy), used by the example encoders."""
    import numpy as np
    a = np.asarray(a, dtype=np.float32)
    norms = np.sqrt((a * a).sum(axis=-1, keepdims=True))
    return a / np.maximum(norms, eps)


__all__ = ["ProtocolError", "argument_parser", "read_record", "read_batch", "hello_line",
           "reply_bytes", "sparse_bytes", "done_bytes", "serve", "main_guard",
           "l2_normalize_rows"]
