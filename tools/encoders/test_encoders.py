#!/usr/bin/env python3
"""Tests of the Python encoders without downloading any weights.

The protocol module needs numpy; the ColBERT and DiffRetriever logic is exercised with
tiny randomly initialised torch stand-ins for BERT and for a masked diffusion LM (the
real models need transformers + weights). Run directly: exits 77 (automake's "skip")
when numpy or torch is missing, 0 when every test passes, 1 otherwise.
"""

import io
import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

if np is not None:
    import tartan_protocol as tp


def frame(rid, text):
    r, t = rid.encode(), text.encode()
    return struct.pack("<I", len(r)) + r + struct.pack("<I", len(t)) + t


def parse_replies(buf, dim, elem=4):
    """(hello fields, [(id, n, array)], done count) from a protocol output stream."""
    nl = buf.index(b"\n")
    hello = buf[:nl].decode().split(" ", 5)
    p = nl + 1
    out = []
    while buf[p:p + 4] == b"VECS":
        (il,) = struct.unpack_from("<I", buf, p + 4)
        rid = buf[p + 8:p + 8 + il].decode()
        (n,) = struct.unpack_from("<I", buf, p + 8 + il)
        q = p + 12 + il
        a = np.frombuffer(buf[q:q + n * dim * elem], dtype="<f4" if elem == 4 else "<f2")
        out.append((rid, n, a.reshape(n, dim).astype(np.float32)))
        p = q + n * dim * elem
    assert buf[p:p + 4] == b"DONE", buf[p:p + 16]
    (count,) = struct.unpack_from("<Q", buf, p + 4)
    assert p + 12 == len(buf), "bytes after DONE"
    return hello, out, count


@unittest.skipIf(np is None, "numpy missing")
class TestProtocol(unittest.TestCase):
    def test_hello(self):
        self.assertEqual(tp.hello_line(128, "f16", 32, "my\nencoder  x"),
                         b"TARTAN-ENCODER 1 128 f16 32 my encoder x\n")
        with self.assertRaises(ValueError):
            tp.hello_line(0)
        with self.assertRaises(ValueError):
            tp.hello_line(8, "f64")

    def test_serve_round_trip_batches(self):
        inp = io.BytesIO(b"".join(frame("d%d" % i, "x" * i) for i in range(7)))
        out = io.BytesIO()
        calls = []

        def enc(texts):
            calls.append(len(texts))
            return [np.full((1 + len(t) % 2, 4), len(t) + 1, np.float32) for t in texts]

        n = tp.serve(enc, 4, max_vectors=2, description="t", batch_size=3, stdin=inp,
                     stdout=out)
        self.assertEqual(n, 7)
        self.assertEqual(calls, [3, 3, 1])
        hello, replies, count = parse_replies(out.getvalue(), 4)
        self.assertEqual(hello, ["TARTAN-ENCODER", "1", "4", "f32", "2", "t"])
        self.assertEqual(count, 7)
        self.assertEqual([r[0] for r in replies], ["d%d" % i for i in range(7)])
        for i, (_, n_, a) in enumerate(replies):
            self.assertEqual(n_, 1 + i % 2)
            self.assertTrue((a == i + 1).all())

    def test_empty_input_and_exact_batch(self):
        out = io.BytesIO()
        self.assertEqual(tp.serve(lambda t: [], 2, stdin=io.BytesIO(), stdout=out), 0)
        self.assertTrue(out.getvalue().endswith(b"DONE" + struct.pack("<Q", 0)))
        inp = io.BytesIO(frame("a", "1") + frame("b", "2"))
        out = io.BytesIO()
        tp.serve(lambda ts: [np.ones((1, 2))] * len(ts), 2, batch_size=2, stdin=inp,
                 stdout=out)
        self.assertEqual(parse_replies(out.getvalue(), 2)[2], 2)

    def test_f16(self):
        inp = io.BytesIO(frame("a", "t"))
        out = io.BytesIO()
        tp.serve(lambda ts: [np.array([[0.5, -2.0, 1024.0]])], 3, dtype="f16", stdin=inp,
                 stdout=out)
        _, replies, _ = parse_replies(out.getvalue(), 3, elem=2)
        self.assertEqual(replies[0][2].tolist(), [[0.5, -2.0, 1024.0]])
        with self.assertRaises(tp.ProtocolError):
            tp.reply_bytes(b"a", np.array([[1e6, 0, 0]]), 3, "f16")

    def test_bad_results(self):
        with self.assertRaises(tp.ProtocolError):
            tp.reply_bytes(b"a", np.array([[np.nan, 0]]), 2)
        with self.assertRaises(tp.ProtocolError):
            tp.reply_bytes(b"a", np.zeros((2, 3)), 2)
        with self.assertRaises(tp.ProtocolError):
            tp.reply_bytes(b"a", np.zeros((3, 2)), 2, max_vectors=2)
        with self.assertRaises(tp.ProtocolError):  # wrong number of results
            tp.serve(lambda ts: [], 2, stdin=io.BytesIO(frame("a", "b")), stdout=io.BytesIO())
        with self.assertRaises(tp.ProtocolError):  # truncated input
            tp.serve(lambda ts: [np.ones((1, 2))] * len(ts), 2,
                     stdin=io.BytesIO(frame("a", "hello")[:-2]), stdout=io.BytesIO())


# ------------------------------------------------------------------ tiny stand-ins

def tiny_encoder(vocab, hidden, seed):
    """A one-layer bidirectional transformer with BERT's masking semantics: the attention
    mask hides keys (padding), every position still gets an output."""
    torch.manual_seed(seed)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, hidden)
            self.pos = torch.nn.Embedding(512, hidden)
            self.qkv = torch.nn.Linear(hidden, 3 * hidden)
            self.ff = torch.nn.Sequential(torch.nn.Linear(hidden, 2 * hidden), torch.nn.GELU(),
                                          torch.nn.Linear(2 * hidden, hidden))
            self.calls = 0

        def forward(self, ids, att):
            self.calls += 1
            x = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))[None]
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            s = q @ k.transpose(1, 2) / hidden ** 0.5
            s = s.masked_fill(att[:, None, :] == 0, float("-inf"))
            x = x + torch.softmax(s, dim=-1) @ v
            return x + self.ff(x)

    return Tiny().eval()


def tiny_tokenize(vocab_base, vocab):
    """Words to ids (stable hash into [vocab_base, vocab)); '.' and ',' are 6 and 7."""
    def tok(texts):
        out = []
        for t in texts:
            ids = []
            for w in t.replace(".", " . ").replace(",", " , ").split():
                ids.append({".": 6, ",": 7}.get(w, vocab_base + sum(map(ord, w)) %
                                                (vocab - vocab_base)))
            out.append(ids)
        return out
    return tok


@unittest.skipIf(torch is None or np is None, "torch missing")
class TestColBERT(unittest.TestCase):
    def setUp(self):
        import colbert_encoder as ce
        self.model = tiny_encoder(100, 16, seed=1)
        torch.manual_seed(2)
        self.linear = torch.nn.Linear(16, 8, bias=False)
        self.logic = ce.ColBERTLogic(tiny_tokenize(10, 100), self.model, self.linear, cls_id=1,
                                     sep_id=2, mask_id=3, pad_id=0, q_marker_id=4,
                                     d_marker_id=5, skiplist={6, 7}, query_maxlen=32,
                                     doc_maxlen=12)
        self.ce = ce

    def test_query_augmentation(self):
        ids, att = self.logic.query_inputs([[10, 11, 12]])
        self.assertEqual(ids[0].tolist(), [1, 4, 10, 11, 12, 2] + [3] * 26)
        self.assertEqual(att[0].tolist(), [1] * 6 + [0] * 26)
        ids, att = self.logic.query_inputs([list(range(10, 50))])
        self.assertEqual(ids[0].tolist(), [1, 4] + list(range(10, 39)) + [2])
        self.assertEqual(att[0].sum().item(), 32)
        self.logic.attend_to_mask = True
        _, att = self.logic.query_inputs([[10]])
        self.assertEqual(att[0].tolist(), [1] * 32)

    def test_query_vectors(self):
        vs = self.logic.encode_queries(["stem cells", "quantum chromodynamics of quarks"])
        for v in vs:
            self.assertEqual(v.shape, (32, 8))
            self.assertTrue(np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5))
        # the [MASK] positions carry the query's context: not all equal to each other
        # across queries (query augmentation is not a constant)
        self.assertFalse(np.allclose(vs[0][20], vs[1][20]))

    def test_doc_punctuation_truncation_and_batching(self):
        ids, att, keep = self.logic.doc_inputs([[10, 6, 11, 7]])
        self.assertEqual(ids[0].tolist(), [1, 5, 10, 6, 11, 7, 2])
        self.assertEqual(keep[0].tolist(), [True, True, True, False, True, False, True])
        (v,) = self.logic.encode_docs(["alpha, beta."])
        self.assertEqual(v.shape, (5, 8))  # [CLS] [D] alpha beta [SEP]
        long_doc = " ".join("w%d" % i for i in range(40))
        (v,) = self.logic.encode_docs([long_doc])
        self.assertEqual(v.shape, (12, 8))  # doc_maxlen
        # padding inside a batch must not change a document's vectors
        alone = self.logic.encode_docs(["alpha, beta."])[0]
        batched = self.logic.encode_docs([long_doc, "alpha, beta.", "x"])[1]
        self.assertTrue(np.allclose(alone, batched, atol=1e-5))

    def test_serve_queries(self):
        inp = io.BytesIO(frame("q1", "stem cells") + frame("q2", "x"))
        out = io.BytesIO()
        tp.serve(self.logic.encode_queries, 8, max_vectors=32, stdin=inp, stdout=out)
        _, replies, count = parse_replies(out.getvalue(), 8)
        self.assertEqual(count, 2)
        self.assertEqual([(r[0], r[1]) for r in replies], [("q1", 32), ("q2", 32)])


@unittest.skipIf(torch is None or np is None, "torch missing")
class TestDiffRetriever(unittest.TestCase):
    def make(self, k, padded=True, max_text=20):
        import diffretriever_encoder as de
        self.de = de
        self.model = tiny_encoder(200, 24, seed=3)
        prefix, suffix = de.split_template(de.PASSAGE_TEMPLATE, k)
        tok = tiny_tokenize(20, 200)
        return de.DiffRetrieverLogic(tok, self.model, mask_id=9, pad_id=0, k=k,
                                     prefix_ids=tok([prefix])[0], suffix_ids=tok([suffix])[0],
                                     max_text_tokens=max_text, padded_batches=padded)

    def test_family_defaults_and_templates(self):
        import diffretriever_encoder as de
        self.assertEqual((de.FAMILIES["dream"]["kq"], de.FAMILIES["dream"]["kp"]), (4, 16))
        self.assertEqual((de.FAMILIES["llada"]["kq"], de.FAMILIES["llada"]["kp"]), (4, 4))
        pre, suf = de.split_template("Q: {text} in {k} words", 4)
        self.assertEqual((pre, suf), ("Q: ", " in 4 words"))
        with self.assertRaises(ValueError):
            de.split_template("no text here", 4)
        self.assertNotEqual(de.template_hash("a"), de.template_hash("b"))

    def test_sequence_and_positions(self):
        logic = self.make(16, max_text=5)
        seq = logic.sequence(list(range(100, 110)))
        n_pre, n_suf = len(logic.prefix_ids), len(logic.suffix_ids)
        self.assertEqual(seq[:n_pre], logic.prefix_ids)
        self.assertEqual(seq[n_pre:n_pre + 5], list(range(100, 105)))  # text truncated
        self.assertEqual(seq[n_pre + 5:n_pre + 5 + n_suf], logic.suffix_ids)  # prompt kept
        self.assertEqual(seq[-16:], [9] * 16)
        short = logic.sequence([100])
        ids, att, pos = logic.batch_inputs([seq, short])
        self.assertEqual(pos[0].tolist(), list(range(len(seq) - 16, len(seq))))
        self.assertEqual(pos[1].tolist(), list(range(len(short) - 16, len(short))))
        self.assertTrue((ids[1, pos[1]] == 9).all())
        self.assertEqual(att[1].sum().item(), len(short))

    def test_vectors_are_hidden_states_at_masks(self):
        logic = self.make(4)
        logic.normalize = False
        texts = ["stem cells divide", "quarks"]
        vs = logic.encode(texts)
        self.assertEqual(logic.forward_calls, 1)  # one forward pass per batch
        for t, v in zip(texts, vs):
            seq = logic.sequence(logic.tokenize([t])[0])
            h = self.model(torch.tensor([seq]), torch.ones(1, len(seq), dtype=torch.long))
            self.assertEqual(v.shape, (4, 24))
            self.assertTrue(np.allclose(v, h[0, -4:].detach().numpy(), atol=1e-5))

    def test_batching_invariance_and_llada_grouping(self):
        logic = self.make(16)
        texts = ["stem cells divide quickly in mice", "quarks", "a b c"]
        batched = logic.encode(texts)
        for t, v in zip(texts, batched):
            alone = logic.encode([t])[0]
            self.assertEqual(alone.shape, (16, 24))
            self.assertTrue(np.allclose(alone, v, atol=1e-5))
            self.assertTrue(np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5))
        llada = self.make(4, padded=False)
        texts = ["one two", "three four", "five"]  # lengths 2, 2, 1: two groups
        out = llada.encode(texts)
        self.assertEqual(llada.forward_calls, 2)
        for t, v in zip(texts, out):
            self.assertTrue(np.allclose(llada.encode([t])[0], v, atol=1e-5))

    def test_serve(self):
        logic = self.make(16)
        inp = io.BytesIO(frame("d1", "stem cells") + frame("d2", "") + frame("d3", "x y"))
        out = io.BytesIO()
        tp.serve(logic.encode, 24, max_vectors=16, batch_size=2, stdin=inp, stdout=out)
        _, replies, count = parse_replies(out.getvalue(), 24)
        self.assertEqual(count, 3)
        self.assertEqual([(r[0], r[1]) for r in replies], [("d1", 16), ("d2", 16), ("d3", 16)])
        self.assertEqual(logic.forward_calls, 2)


if __name__ == "__main__":
    if np is None or torch is None:
        print("skip: %s missing" % ("numpy" if np is None else "torch"))
        if np is None:
            sys.exit(77)
    result = unittest.main(exit=False, verbosity=1).result
    if not result.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if torch is None else 0)
