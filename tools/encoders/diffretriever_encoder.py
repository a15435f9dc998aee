#!/usr/bin/env python3
"""DiffRetriever-style multi-vector encoder for tartan (doc/encoder-protocol.md).

DiffRetriever (Wang et al. 2026) encodes a text with a masked diffusion language model
(Dream or LLaDA): the text is placed in a prompt that asks for a short representation,
K mask tokens are appended, ONE forward pass is run (bidirectional attention, no
denoising steps), and the final hidden states at the K masked positions are the text's
K vectors. Defaults follow the paper's settings: Kq = 4 query and Kp = 16 passage
vectors for Dream, 4 and 4 for LLaDA. Scoring is MaxSim averaged over query vectors
(tartan search --score mean).

    tartan encode --encoder "python3 tools/encoders/diffretriever_encoder.py \
        --family dream" --input corpus.jsonl --mode passage --out c

Needs torch, transformers and the model weights (Dream-org/Dream-v0-Instruct-7B, hidden
size 3584, or GSAI-ML/LLaDA-8B-Instruct, hidden size 4096; both trust_remote_code).

PROMPTS: QUERY_TEMPLATE and PASSAGE_TEMPLATE below have the form the paper describes
(text, then an instruction to represent it in K words, then the K masks), but they are
NOT the paper's verbatim wording, which was not available when this was written. For a
faithful reproduction replace them (or pass --query-template / --passage-template); the
template's hash is part of the encoder description stored in the index, so indexes made
with different prompts can be told apart.

The input/position/selection logic lives in DiffRetrieverLogic, independent of
transformers, and is tested with a tiny randomly initialised stand-in model
(tools/encoders/test_encoders.py).

SPARSE (--sparse, protocol 2): DiffRetriever's sparse representation -- the language-
model logits at the K masked positions, max-pooled over the positions, kept only for
vocabulary entries that are lowercase content words (PromptReps' filter: the token,
without its word-start marker, is all lowercase letters, at least 2 of them, and not a
stop word), weighted log(1 + relu(logit)), the `--sparse-top` heaviest kept (a term
several tokens spell takes its largest weight). tartan indexes them as quantized
weights and scores s_q . s_p (doc/search.md, "Hybrid retrieval"); `tartan search
--mode hybrid` fuses them with the dense MaxSim as the paper's Eq. 3-4. The selection
is sparse_terms() below (numpy only, tested in tests/cli_hybrid.sh).
"""

import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tartan_protocol as tp  # noqa: E402

# ---- configurable prompts: {text} is the record's text, {k} the number of masks -------
QUERY_TEMPLATE = ('Query: {text}\n'
                  'Represent this query with {k} words for retrieving relevant passages:')
PASSAGE_TEMPLATE = ('Passage: {text}\n'
                    'Represent this passage with {k} words for retrieval:')

FAMILIES = {
    # kq/kp: masked positions per query/passage (Wang et al. 2026 settings)
    "dream": dict(model="Dream-org/Dream-v0-Instruct-7B", kq=4, kp=16, mask_id=None,
                  padded_batches=True),
    # LLaDA's forward takes no attention mask: batches are grouped by exact length
    "llada": dict(model="GSAI-ML/LLaDA-8B-Instruct", kq=4, kp=4, mask_id=126336,
                  padded_batches=False),
}

_SENTINEL = "\u2063TARTAN_TEXT\u2063"

# PromptReps-style filter: English stop words never become sparse terms.
STOPWORDS = frozenset("""a about above after again against all am an and any are as at be
because been before being below between both but by can did do does doing down during each
few for from further had has have having he her here hers herself him himself his how i if
in into is it its itself just me more most my myself no nor not now of off on once only or
other our ours ourselves out over own same she should so some such than that the their
theirs them themselves then there these they this those through to too under until up very
was we were what when where which while who whom why will with you your yours yourself
yourselves""".split())


def content_word(token):
    """The word a vocabulary entry spells if it is a lowercase content word, else None
    (word-start markers of SentencePiece and byte-level BPE are stripped)."""
    w = token.lstrip("\u2581\u0120 ")
    if len(w) < 2 or not (w.isascii() and w.isalpha() and w.islower()) or w in STOPWORDS:
        return None
    return w


def sparse_terms(logits, vocab_words, top=128):
    """{word: weight} from the logits at the K masked positions ([K, V] numpy): max over
    the positions, log(1 + relu(.)), only entries with a word (vocab_words[v] not None),
    the `top` heaviest positive ones."""
    import numpy as np
    pooled = np.asarray(logits, dtype=np.float64).max(axis=0)
    w = np.log1p(np.maximum(pooled, 0.0))
    out = {}
    for v in np.argsort(-w, kind="stable"):
        if w[v] <= 0 or len(out) >= top:
            break
        word = vocab_words[v]
        if word is not None and word not in out:
            out[word] = float(w[v])
    return out


def split_template(template, k):
    """(prefix, suffix) around {text}, with {k} filled in."""
    if template.count("{text}") != 1:
        raise ValueError("a prompt template needs exactly one {text}")
    t = template.replace("{k}", str(k))
    prefix, _, suffix = t.partition("{text}")
    return prefix, suffix


def template_hash(*templates):
    return hashlib.sha1("\x00".join(templates).encode("utf-8")).hexdigest()[:10]


class DiffRetrieverLogic:
    """Builds one sequence per text -- prefix + text (truncated) + suffix + K masks --,
    batches them right-padded, runs the model once per batch and gathers the hidden
    states at the K mask positions.

    tokenize(texts) -> list of id lists (no special tokens);
    model(ids, attention_mask) -> hidden states [B, L, H] of the chosen layer (torch);
    prefix_ids/suffix_ids: the tokenised prompt around the text.
    """

    def __init__(self, tokenize, model, mask_id, pad_id, k, prefix_ids, suffix_ids,
                 max_text_tokens=512, padded_batches=True, normalize=True):
        if k < 1:
            raise ValueError("k must be >= 1")
        self.tokenize, self.model = tokenize, model
        self.mask_id, self.pad_id, self.k = mask_id, pad_id, k
        self.prefix_ids, self.suffix_ids = list(prefix_ids), list(suffix_ids)
        self.max_text_tokens = max_text_tokens
        self.padded_batches = padded_batches
        self.normalize = normalize
        self.forward_calls = 0

    def sequence(self, text_ids):
        return (self.prefix_ids + list(text_ids[:self.max_text_tokens]) + self.suffix_ids +
                [self.mask_id] * self.k)

    def batch_inputs(self, seqs):
        """ids, attention mask [B, L] (right padding) and mask positions [B, K]."""
        import torch
        L = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), L), self.pad_id, dtype=torch.long)
        att = torch.zeros((len(seqs), L), dtype=torch.long)
        pos = torch.zeros((len(seqs), self.k), dtype=torch.long)
        for b, s in enumerate(seqs):
            ids[b, :len(s)] = torch.tensor(s, dtype=torch.long)
            att[b, :len(s)] = 1
            pos[b] = torch.arange(len(s) - self.k, len(s))
        return ids, att, pos

    def _run(self, seqs):
        import torch
        ids, att, pos = self.batch_inputs(seqs)
        with torch.no_grad():
            self.forward_calls += 1
            h = self.model(ids, att)
            picked = h.gather(1, pos.to(h.device).unsqueeze(-1).expand(-1, -1, h.shape[-1]))
            picked = picked.float()
            if self.normalize:
                picked = torch.nn.functional.normalize(picked, p=2, dim=-1)
        return [picked[b].cpu().numpy() for b in range(len(seqs))]

    def encode(self, texts):
        seqs = [self.sequence(t) for t in self.tokenize(texts)]
        if self.padded_batches:
            return self._run(seqs)
        out = [None] * len(seqs)
        by_len = {}
        for i, s in enumerate(seqs):
            by_len.setdefault(len(s), []).append(i)
        for idx in by_len.values():  # equal lengths: no padding, no mask needed
            for i, v in zip(idx, self._run([seqs[i] for i in idx])):
                out[i] = v
        return out


def main():
    p = tp.argument_parser("DiffRetriever-style (Dream / LLaDA) encoder for tartan")
    p.add_argument("--family", choices=sorted(FAMILIES), default="dream")
    p.add_argument("--model", help="hub name or directory (default: the family's model)")
    p.add_argument("--kq", type=int, help="masked positions per query (dream 4, llada 4)")
    p.add_argument("--kp", type=int, help="masked positions per passage (dream 16, llada 4)")
    p.add_argument("--layer", type=int, default=-1, help="hidden-state layer (default last)")
    p.add_argument("--max-text-tokens", type=int, default=512)
    p.add_argument("--query-template", default=QUERY_TEMPLATE)
    p.add_argument("--passage-template", default=PASSAGE_TEMPLATE)
    p.add_argument("--chat-template", action="store_true",
                   help="wrap the prompt in the model's chat template; masks follow the "
                        "assistant turn's start")
    p.add_argument("--raw", action="store_true", help="do not L2-normalise the vectors")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--device", default=None)
    p.add_argument("--f16", action="store_true", help="send float16 (only with normalising)")
    p.add_argument("--sparse", action="store_true",
                   help="also send the sparse vector of the masked positions' logits "
                        "(protocol 2)")
    p.add_argument("--sparse-top", type=int, default=128,
                   help="terms kept per text by --sparse (default 128)")
    args = p.parse_args()
    fam = FAMILIES[args.family]
    query = args.mode == "query"
    k = (args.kq or fam["kq"]) if query else (args.kp or fam["kp"])
    template = args.query_template if query else args.passage_template
    model_name = args.model or fam["model"]
    if args.f16 and args.raw:
        raise SystemExit("--f16 needs normalised vectors (LLM hidden states overflow float16)")

    import torch
    from transformers import AutoModel, AutoTokenizer
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tok = AutoTokenizer.from_pretrained(model_name, trust_remote_code=True)
    lm = AutoModel.from_pretrained(model_name, trust_remote_code=True,
                                   torch_dtype=torch.bfloat16).to(device).eval()
    mask_id = fam["mask_id"] if fam["mask_id"] is not None else tok.mask_token_id
    if mask_id is None:
        raise RuntimeError("%s: tokenizer has no mask token" % model_name)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    if args.chat_template:
        body = template.replace("{k}", str(k)).replace("{text}", _SENTINEL)
        rendered = tok.apply_chat_template([{"role": "user", "content": body}], tokenize=False,
                                           add_generation_prompt=True)
        prefix, _, suffix = rendered.partition(_SENTINEL)
    else:
        prefix, suffix = split_template(template, k)
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prefix_ids, suffix_ids = enc(prefix), enc(suffix)

    def tokenize(texts):
        return tok(texts, add_special_tokens=False)["input_ids"]

    last_logits = {}

    def model(ids, att):
        ids, att = ids.to(device), att.to(device)
        if fam["padded_batches"]:
            # Dream: a 4-D boolean mask keeps the attention bidirectional among real tokens
            m = att.bool()
            att4 = m[:, None, None, :] & m[:, None, :, None]
            out = lm(input_ids=ids, attention_mask=att4, output_hidden_states=True)
        else:
            out = lm(input_ids=ids, output_hidden_states=True)
        if args.sparse:  # the LM head's logits, for the masked positions' sparse vector
            logits = getattr(out, "logits", None)
            if logits is None:
                logits = lm.get_output_embeddings()(out.hidden_states[-1])
            last_logits["v"] = logits
        return out.hidden_states[args.layer]

    logic = DiffRetrieverLogic(tokenize, model, mask_id, pad_id, k, prefix_ids, suffix_ids,
                               max_text_tokens=args.max_text_tokens,
                               padded_batches=fam["padded_batches"], normalize=not args.raw)
    hidden = lm.config.hidden_size
    desc = ("diffretriever family=%s model=%s K=%d layer=%d prompt=%s%s%s%s"
            % (args.family, model_name, k, args.layer, template_hash(template),
               " chat" if args.chat_template else "", " raw" if args.raw else "",
               " sparse=promptreps-top%d" % args.sparse_top if args.sparse else ""))
    encode = logic.encode
    if args.sparse:
        vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
        words = [content_word(t) if isinstance(t, str) else None for t in vocab]

        def encode(texts):  # noqa: F811 - the sparse variant
            # one text per forward pass, so the logits at its K masks are known
            out = []
            for t in texts:
                seq = logic.sequence(logic.tokenize([t])[0])
                vecs = logic._run([seq])[0]
                lg = last_logits["v"][0, len(seq) - k:len(seq)].float().cpu().numpy()
                out.append((vecs, sparse_terms(lg[:, :len(words)], words, args.sparse_top)))
            return out
    tp.serve(encode, hidden, dtype="f16" if args.f16 else "f32", max_vectors=k,
             description=desc, batch_size=args.batch_size, sparse=args.sparse)


if __name__ == "__main__":
    tp.main_guard(main)
