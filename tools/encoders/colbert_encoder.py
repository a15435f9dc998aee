#!/usr/bin/env python3
"""ColBERT (v1/v2) token-vector encoder for tartan (doc/encoder-protocol.md).

    tartan encode --encoder "python3 tools/encoders/colbert_encoder.py \
        --checkpoint colbert-ir/colbertv2.0" --input corpus.jsonl --mode passage --out c

Needs torch and transformers, and a ColBERT checkpoint (a BERT model plus the
`linear.weight` projection, as colbert-ir/colbertv2.0 ships). It reproduces ColBERT's
input conventions (Khattab & Zaharia 2020; Santhanam et al. 2022, colbert-ai code):

  query:    [CLS] [Q] tokens... [SEP] then [MASK] up to query_maxlen (32) -- "query
            augmentation"; the [MASK] positions get attention 0 unless --attend-to-mask
            (ColBERTv2's attend_to_mask_tokens=False) but all 32 output vectors are kept;
  passage:  [CLS] [D] tokens... [SEP], truncated to doc_maxlen (180); vectors of
            punctuation tokens and of padding are dropped (mask_punctuation);
  both:     last hidden state -> linear (hidden -> 128, no bias) -> L2 normalisation.

[Q] and [D] are BERT's [unused0] and [unused1]. The pure input/selection logic lives in
ColBERTLogic, independent of transformers, so it is tested with a tiny stand-in model
(tools/encoders/test_encoders.py).
"""

import os
import string
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tartan_protocol as tp  # noqa: E402

QUERY_MARKER = "[unused0]"  # ColBERT's [Q]
DOC_MARKER = "[unused1]"    # ColBERT's [D]


class ColBERTLogic:
    """Builds ColBERT's model inputs and selects/normalises its output vectors.

    tokenize(texts) -> list of token-id lists without special tokens;
    model(ids, attention_mask) -> last hidden state [B, L, H] (torch);
    linear: torch module H -> dim.
    """

    def __init__(self, tokenize, model, linear, cls_id, sep_id, mask_id, pad_id, q_marker_id,
                 d_marker_id, skiplist=(), query_maxlen=32, doc_maxlen=180,
                 attend_to_mask=False):
        if query_maxlen < 4 or doc_maxlen < 4:
            raise ValueError("query_maxlen and doc_maxlen must be >= 4")
        self.tokenize, self.model, self.linear = tokenize, model, linear
        self.cls_id, self.sep_id, self.mask_id, self.pad_id = cls_id, sep_id, mask_id, pad_id
        self.q_marker_id, self.d_marker_id = q_marker_id, d_marker_id
        self.skiplist = frozenset(skiplist)
        self.query_maxlen, self.doc_maxlen = query_maxlen, doc_maxlen
        self.attend_to_mask = attend_to_mask

    def query_inputs(self, token_lists):
        """ids and attention mask, both [B, query_maxlen] (torch.long)."""
        import torch
        L = self.query_maxlen
        ids = torch.full((len(token_lists), L), self.mask_id, dtype=torch.long)
        att = torch.full((len(token_lists), L), 1 if self.attend_to_mask else 0,
                         dtype=torch.long)
        for b, toks in enumerate(token_lists):
            seq = [self.cls_id, self.q_marker_id] + list(toks[:L - 3]) + [self.sep_id]
            ids[b, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            att[b, :len(seq)] = 1
        return ids, att

    def doc_inputs(self, token_lists):
        """ids, attention mask and the mask of vectors to keep, [B, longest <= doc_maxlen]."""
        import torch
        seqs = [[self.cls_id, self.d_marker_id] + list(t[:self.doc_maxlen - 3]) + [self.sep_id]
                for t in token_lists]
        L = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), L), self.pad_id, dtype=torch.long)
        att = torch.zeros((len(seqs), L), dtype=torch.long)
        keep = torch.zeros((len(seqs), L), dtype=torch.bool)
        for b, s in enumerate(seqs):
            ids[b, :len(s)] = torch.tensor(s, dtype=torch.long)
            att[b, :len(s)] = 1
            keep[b, :len(s)] = torch.tensor([t not in self.skiplist for t in s])
        return ids, att, keep

    def _project(self, ids, att):
        import torch
        with torch.no_grad():
            h = self.model(ids, att)
            v = self.linear(h).float()
            return torch.nn.functional.normalize(v, p=2, dim=-1)

    def encode_queries(self, texts):
        ids, att = self.query_inputs(self.tokenize(texts))
        v = self._project(ids, att)
        return [v[b].cpu().numpy() for b in range(len(texts))]

    def encode_docs(self, texts):
        ids, att, keep = self.doc_inputs(self.tokenize(texts))
        v = self._project(ids, att)
        return [v[b][keep[b]].cpu().numpy() for b in range(len(texts))]


def load_linear(checkpoint, hidden, dim):
    """The `linear.weight` [dim, hidden] of a ColBERT checkpoint directory or hub name."""
    import torch
    path = checkpoint
    if not os.path.isdir(path):
        from huggingface_hub import snapshot_download  # comes with transformers
        path = snapshot_download(checkpoint, allow_patterns=["*.safetensors", "*.bin", "*.json"])
    state = None
    st_file = os.path.join(path, "model.safetensors")
    if os.path.exists(st_file):
        from safetensors.torch import load_file
        state = load_file(st_file)
    else:
        state = torch.load(os.path.join(path, "pytorch_model.bin"), map_location="cpu")
    w = state.get("linear.weight")
    if w is None:
        raise RuntimeError("%s has no linear.weight: not a ColBERT checkpoint" % checkpoint)
    if tuple(w.shape) != (dim, hidden):
        raise RuntimeError("linear.weight is %s, expected (%d, %d)" % (tuple(w.shape), dim,
                                                                       hidden))
    lin = torch.nn.Linear(hidden, dim, bias=False)
    lin.weight.data.copy_(w.float())
    return lin


def main():
    p = tp.argument_parser("ColBERT token-vector encoder for tartan")
    p.add_argument("--checkpoint", required=True, help="directory or hub name")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--query-maxlen", type=int, default=32)
    p.add_argument("--doc-maxlen", type=int, default=180)
    p.add_argument("--attend-to-mask", action="store_true")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--f16", action="store_true", help="send float16 (half the pipe traffic)")
    args = p.parse_args()

    import torch
    from transformers import AutoModel, AutoTokenizer
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tok = AutoTokenizer.from_pretrained(args.checkpoint)
    bert = AutoModel.from_pretrained(args.checkpoint).to(device).eval()
    linear = load_linear(args.checkpoint, bert.config.hidden_size, args.dim).to(device)
    skip = set()
    for sym in string.punctuation:
        ids = tok.encode(sym, add_special_tokens=False)
        if ids:
            skip.add(ids[0])

    def tokenize(texts):
        return tok(texts, add_special_tokens=False, truncation=False)["input_ids"]

    def model(ids, att):
        return bert(input_ids=ids.to(device), attention_mask=att.to(device)).last_hidden_state

    logic = ColBERTLogic(tokenize, model, linear, tok.cls_token_id, tok.sep_token_id,
                         tok.mask_token_id, tok.pad_token_id,
                         tok.convert_tokens_to_ids(QUERY_MARKER),
                         tok.convert_tokens_to_ids(DOC_MARKER), skiplist=skip,
                         query_maxlen=args.query_maxlen, doc_maxlen=args.doc_maxlen,
                         attend_to_mask=args.attend_to_mask)
    query = args.mode == "query"
    desc = ("colbert checkpoint=%s dim=%d query_maxlen=%d doc_maxlen=%d [Q]/[D] markers, "
            "[MASK] query augmentation%s" % (args.checkpoint, args.dim, args.query_maxlen,
                                             args.doc_maxlen,
                                             ", attend_to_mask" if args.attend_to_mask else ""))
    tp.serve(logic.encode_queries if query else logic.encode_docs, args.dim,
             dtype="f16" if args.f16 else "f32",
             max_vectors=args.query_maxlen if query else args.doc_maxlen,
             description=desc, batch_size=args.batch_size)


if __name__ == "__main__":
    tp.main_guard(main)
