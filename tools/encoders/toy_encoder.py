#!/usr/bin/env python3
"""The smallest useful tartan encoder: one vector per word (at most 64), the word's
letter-and-digit histogram, L2-normalised (36 dimensions). Needs only numpy. A template
for writing encoders with tartan_protocol.serve(); not a retrieval model.

    tartan encode --encoder "python3 tools/encoders/toy_encoder.py" \
        --input queries.jsonl --mode query --out q
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tartan_protocol as tp  # noqa: E402

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
DIM = len(ALPHABET)
MAX_WORDS = 64


def encode_text(text):
    import numpy as np
    words = re.findall(r"[a-z0-9]+", text.lower())[:MAX_WORDS] or ["empty"]
    v = np.zeros((len(words), DIM), dtype=np.float32)
    for i, w in enumerate(words):
        for ch in w:
            v[i, ALPHABET.index(ch)] += 1
    return tp.l2_normalize_rows(v)


def main():
    p = tp.argument_parser("toy letter-histogram encoder")
    p.add_argument("--batch-size", type=int, default=16)
    args = p.parse_args()
    tp.serve(lambda texts: [encode_text(t) for t in texts], DIM, max_vectors=MAX_WORDS,
             description="toy letter-histogram encoder mode=%s" % args.mode,
             batch_size=args.batch_size)


if __name__ == "__main__":
    tp.main_guard(main)
