/* tartan-hash-encoder: a dependency-free LEXICAL BASELINE encoder speaking the tartan
 * encoder protocol (doc/encoder-protocol.md). No model, no corpus statistics, no
 * state: the same text always gives the same vectors.
 *
 * Tokens: maximal runs of ASCII letters/digits (lowercased) or non-ASCII bytes (UTF-8
 * letters stay inside words); tokens of one byte and a short English stopword list are
 * dropped; s(t) is Harman's S-stem of t (plural endings only). Each token t at position
 * i gets the feature-hashed vector (Weinberger et al. 2009, "Feature hashing for large
 * scale multitask learning")
 *
 *   v(t_i) = W_TOKEN * h("w:" s(t_i))
 *          + W_NGRAM * normalise( sum over character 3/4/5-grams g of "<" t_i ">" of h("g:" g) )
 *          + sum over d = 1..CONTEXT of W_CONTEXT / d * ( h("c:" s(t_{i-d})) + h("c:" s(t_{i+d})) )
 *
 * where h(x) puts SPREAD signed entries of 1/sqrt(SPREAD) at hashed coordinates of a
 * `dim`-dimensional vector, so unrelated features are nearly orthogonal with no
 * catastrophic full collisions; v is then L2-normalised. Under MaxSim an exact query
 * word match scores about W_TOKEN^2/|v|^2, a morphological variant (cell/cells) scores
 * through the shared n-grams, and words in the same context as in the query add a
 * little (the context features).
 *
 *   --kind token   one vector per kept token, like ColBERT (at most 300 per passage and
 *                  32 per query, ColBERT's query length);
 *   --kind fixed   at most K vectors per text, like DiffRetriever's fixed K masked
 *                  positions: token vectors are summed into K buckets chosen by a hash
 *                  of the token itself (the same for queries and passages, so a query
 *                  bucket meets the passage bucket that holds the same words), each
 *                  bucket normalised; empty buckets are not sent.
 *
 * It is a lexical baseline, not a learned model: it knows nothing of synonyms or word
 * importance (no idf). Measured nDCG@10 (exact MaxSim, defaults, dim 128): scifact
 * 0.558 (token) / 0.507 (fixed, K=16), where BM25 scores 0.665; see
 * doc/encoder-protocol.md section 10. The weights were chosen on cranfield and cisi,
 * not on scifact. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROTO_MAGIC "TARTAN-ENCODER"
#define MAX_ID 4096u
#define MAX_TEXT (64u << 20)
#define SPREAD 8

/* Feature weights (see the header comment); --ngram-weight, --context-weight and
 * --context change them for experiments. */
static const double W_TOKEN = 1.0;
static double W_NGRAM = 0.55;
static double W_CONTEXT = 0.25;
static int CONTEXT = 2;
static int STEM = 1; /* --no-stem clears it */

typedef struct cfg {
    int query;          /* --mode query */
    int fixed;          /* --kind fixed */
    uint32_t dim;
    uint32_t k;         /* fixed: buckets */
    uint32_t max_tokens;
} cfg;

static const char *const stopwords[] = {
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been",
    "before", "being", "between", "both", "but", "by", "can", "could", "did", "do", "does",
    "each", "for", "from", "had", "has", "have", "he", "her", "his", "how", "if", "in", "into",
    "is", "it", "its", "more", "most", "no", "not", "of", "on", "or", "other", "our", "over",
    "she", "should", "so", "some", "such", "than", "that", "the", "their", "them", "then",
    "there", "these", "they", "this", "those", "through", "to", "under", "up", "was", "we",
    "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with",
    "would", "you", "your",
};

static int is_stopword(const char *t, size_t n) {
    size_t lo = 0, hi = sizeof stopwords / sizeof stopwords[0];
    while (lo < hi) { /* the list is sorted */
        size_t mid = (lo + hi) / 2;
        int c = strncmp(stopwords[mid], t, n);
        if (c == 0)
            c = stopwords[mid][n] ? 1 : 0;
        if (c == 0)
            return 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* ------------------------------------------------------------ hashing */

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t mix64(uint64_t z) { /* splitmix64 finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t feature_hash(char kind, const char *s, size_t n) {
    uint64_t h = fnv1a(0xcbf29ce484222325ull, &kind, 1);
    return mix64(fnv1a(h, s, n));
}

/* Adds w * h(feature) to v. */
static void add_feature(float *v, uint32_t dim, uint64_t h, double w) {
    const double amp = w / sqrt((double)SPREAD);
    for (int k = 0; k < SPREAD; k++) {
        uint64_t z = mix64(h + 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1));
        uint32_t idx = (uint32_t)((z >> 32) % dim);
        v[idx] += (float)((z & 1) ? -amp : amp);
    }
}

static void normalise(float *v, uint32_t dim) {
    double s = 0;
    for (uint32_t j = 0; j < dim; j++)
        s += (double)v[j] * v[j];
    if (s <= 0)
        return;
    float inv = (float)(1.0 / sqrt(s));
    for (uint32_t j = 0; j < dim; j++)
        v[j] *= inv;
}

/* ----------------------------------------------------------- tokens */

typedef struct tok {
    const char *s;
    size_t n;      /* bytes of the word */
    size_t sn;     /* bytes of its stem (a prefix, or the stem of an -ies word) */
    int ies;       /* stem is s[0..sn) + "y" */
    uint64_t word_hash, ctx_hash;
} tok;

/* Harman's "S" stemmer (Harman 1991, "How effective is suffixing?"): plural -ies -> -y,
 * -es -> -e (not -aes/-ees/-oes), -s -> "" (not -us/-ss); the most conservative
 * English suffix stripping, so cell/cells and model/models share their word feature. */
static void s_stem(tok *t) {
    const char *w = t->s;
    size_t n = t->n;
    t->sn = n;
    t->ies = 0;
    if (!STEM || n < 4 || w[n - 1] != 's')
        return;
    if (w[n - 3] == 'i' && w[n - 2] == 'e' && w[n - 4] != 'e' && w[n - 4] != 'a') {
        t->sn = n - 3;
        t->ies = 1;
    } else if (w[n - 2] == 'e' && w[n - 3] != 'a' && w[n - 3] != 'e' && w[n - 3] != 'o') {
        t->sn = n - 1;
    } else if (w[n - 2] != 'u' && w[n - 2] != 's') {
        t->sn = n - 1;
    }
}

/* feature_hash('w', stem) without copying the stem. */
static uint64_t word_hash(const tok *t) {
    char kind = 'w';
    uint64_t h = fnv1a(fnv1a(0xcbf29ce484222325ull, &kind, 1), t->s, t->sn);
    if (t->ies)
        h = fnv1a(h, "y", 1);
    return mix64(h);
}

static int tok_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c >= 0x80;
}

/* Lowercases text in place and collects kept tokens (at most cap). */
static size_t tokenize(char *text, size_t n, tok *toks, size_t cap) {
    size_t nt = 0;
    for (size_t i = 0; i < n; i++)
        if (text[i] >= 'A' && text[i] <= 'Z')
            text[i] = (char)(text[i] - 'A' + 'a');
    size_t i = 0;
    while (i < n && nt < cap) {
        while (i < n && !tok_char((unsigned char)text[i]))
            i++;
        size_t start = i;
        while (i < n && tok_char((unsigned char)text[i]))
            i++;
        size_t len = i - start;
        if (len < 2 || is_stopword(text + start, len))
            continue;
        toks[nt].s = text + start;
        toks[nt].n = len;
        s_stem(&toks[nt]);
        toks[nt].word_hash = word_hash(&toks[nt]);
        toks[nt].ctx_hash = mix64(toks[nt].word_hash ^ 0x6a09e667f3bcc909ull);
        nt++;
    }
    return nt;
}

/* v (dim floats, zeroed by the caller) = the normalised vector of token i. */
static void token_vector(const tok *toks, size_t nt, size_t i, float *v, float *tmp,
                         uint32_t dim) {
    add_feature(v, dim, toks[i].word_hash, W_TOKEN);
    /* character n-grams of "<token>", as a unit block scaled by W_NGRAM */
    char buf[80];
    size_t L = toks[i].n < sizeof buf - 2 ? toks[i].n : sizeof buf - 2;
    buf[0] = '<';
    memcpy(buf + 1, toks[i].s, L);
    buf[L + 1] = '>';
    size_t bl = L + 2;
    memset(tmp, 0, dim * sizeof *tmp);
    int any = 0;
    for (size_t g = 3; g <= 5; g++)
        for (size_t s = 0; s + g <= bl; s++) {
            add_feature(tmp, dim, feature_hash('g', buf + s, g), 1.0);
            any = 1;
        }
    if (any) {
        normalise(tmp, dim);
        for (uint32_t j = 0; j < dim; j++)
            v[j] += (float)W_NGRAM * tmp[j];
    }
    for (int d = 1; d <= CONTEXT; d++) {
        double w = W_CONTEXT / d;
        if (i >= (size_t)d)
            add_feature(v, dim, toks[i - (size_t)d].ctx_hash, w);
        if (i + (size_t)d < nt)
            add_feature(v, dim, toks[i + (size_t)d].ctx_hash, w);
    }
    normalise(v, dim);
}

/* ---------------------------------------------------------- protocol */

static void die(const char *msg) {
    fprintf(stderr, "tartan-hash-encoder: %s\n", msg);
    exit(1);
}

static uint32_t rd32(const unsigned char *b) {
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
           ((uint32_t)b[3] << 24);
}

static void wr32(uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    if (fwrite(b, 1, 4, stdout) != 4)
        die("write failed");
}

/* stdin through our own buffer, so we know when the next read would block. */
static unsigned char inbuf[1 << 16];
static size_t in_pos, in_len;
static int in_eof;

static int fill(void) {
    for (;;) {
        ssize_t r = read(0, inbuf, sizeof inbuf);
        if (r > 0) {
            in_pos = 0;
            in_len = (size_t)r;
            return 1;
        }
        if (r == 0) {
            in_eof = 1;
            return 0;
        }
        if (errno != EINTR)
            die("read failed");
    }
}

/* 1 if n bytes were read, 0 at a clean EOF before the first one. */
static int read_exact(void *buf, size_t n) {
    unsigned char *p = buf;
    size_t got = 0;
    while (got < n) {
        if (in_pos == in_len && !fill()) {
            if (got == 0)
                return 0;
            die("input ends inside a record");
        }
        size_t k = in_len - in_pos < n - got ? in_len - in_pos : n - got;
        memcpy(p + got, inbuf + in_pos, k);
        in_pos += k;
        got += k;
    }
    return 1;
}

/* Flush replies before blocking on input, so a slow producer never waits on them,
 * while batches of ready records are answered with few writes. */
static void flush_if_input_idle(void) {
    if (in_pos < in_len || in_eof)
        return;
    struct pollfd p = {0, POLLIN, 0};
    if (poll(&p, 1, 0) == 0 && fflush(stdout) != 0)
        die("write failed");
}

static void write_reply(const char *id, uint32_t idlen, const float *vecs, uint32_t n,
                        uint32_t dim) {
    if (fwrite("VECS", 1, 4, stdout) != 4)
        die("write failed");
    wr32(idlen);
    if (fwrite(id, 1, idlen, stdout) != idlen)
        die("write failed");
    wr32(n);
    for (uint64_t i = 0; i < (uint64_t)n * dim; i++) {
        uint32_t u;
        memcpy(&u, &vecs[i], 4);
        wr32(u);
    }
}

/* --sparse (protocol 2): the text's sparse vector, one term per distinct stem of its
 * kept words (the same words the vectors are made of), weight 1 + ln(count). */
typedef struct sterm {
    char s[257];
    uint32_t n;
} sterm;

static int cmp_sterm(const void *a, const void *b) {
    const sterm *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n < y->n ? -1 : x->n > y->n);
}

static void write_sparse(const tok *toks, size_t nt, sterm *st) {
    size_t m = 0;
    for (size_t i = 0; i < nt; i++) {
        size_t n = toks[i].sn + (size_t)toks[i].ies;
        if (n == 0 || n > 256)
            continue;
        memcpy(st[m].s, toks[i].s, toks[i].sn);
        if (toks[i].ies)
            st[m].s[toks[i].sn] = 'y';
        st[m].n = (uint32_t)n;
        m++;
    }
    qsort(st, m, sizeof *st, cmp_sterm);
    uint32_t distinct = 0;
    for (size_t i = 0; i < m; i++)
        distinct += i == 0 || cmp_sterm(&st[i], &st[i - 1]) != 0;
    if (fwrite("SPRS", 1, 4, stdout) != 4)
        die("write failed");
    wr32(distinct);
    for (size_t i = 0; i < m;) {
        size_t j = i + 1;
        while (j < m && cmp_sterm(&st[j], &st[i]) == 0)
            j++;
        float w = (float)(1.0 + log((double)(j - i)));
        uint32_t u;
        memcpy(&u, &w, 4);
        wr32(st[i].n);
        if (fwrite(st[i].s, 1, st[i].n, stdout) != st[i].n)
            die("write failed");
        wr32(u);
        i = j;
    }
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: tartan-hash-encoder --mode passage|query [--kind token|fixed] [--dim D]\n"
            "                           [--k K] [--max-tokens N]\n"
            "\n"
            "A lexical baseline encoder (feature hashing of words, their character 3-5-grams\n"
            "and neighbouring words) speaking the tartan encoder protocol on stdin/stdout\n"
            "(doc/encoder-protocol.md). Not a learned model: no synonyms, no idf.\n"
            "\n"
            "  --kind token    one vector per word, ColBERT-like (default)\n"
            "  --kind fixed    at most K vectors per text (words pooled into K hash buckets),\n"
            "                  DiffRetriever-like\n"
            "  --dim D         vector dimension (default 128)\n"
            "  --k K           buckets for --kind fixed (default 16)\n"
            "  --max-tokens N  words kept per text (default 300 passages, 32 queries)\n"
            "  --no-stem       do not strip plural endings (Harman's S-stemmer)\n"
            "  --sparse        also send each text's sparse vector (protocol 2): its kept\n"
            "                  words' stems weighted 1 + ln(count)\n"
            "  --ngram-weight W, --context-weight W, --context N\n"
            "                  feature weights (defaults 0.55, 0.25) and context window (2)\n"
            "\n"
            "Example: tartan encode --encoder 'tartan-hash-encoder --dim 128' \\\n"
            "           --input corpus.jsonl --mode passage --out corpus\n");
}

static uint32_t parse_num(const char *opt, const char *s, uint32_t lo, uint32_t hi) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s ? s : "", &end, 10);
    if (!s || errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "tartan-hash-encoder: %s needs a number in %u..%u\n", opt, lo, hi);
        exit(2);
    }
    return (uint32_t)v;
}

int main(int argc, char **argv) {
    cfg c = {0, 0, 128, 16, 0};
    const char *mode = NULL;
    int sparse = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--mode")) {
            mode = v;
            i++;
        } else if (!strcmp(a, "--kind")) {
            if (!v || (strcmp(v, "token") && strcmp(v, "fixed"))) {
                fprintf(stderr, "tartan-hash-encoder: --kind is token or fixed\n");
                return 2;
            }
            c.fixed = !strcmp(v, "fixed");
            i++;
        } else if (!strcmp(a, "--dim")) {
            c.dim = parse_num(a, v, 8, 65536);
            i++;
        } else if (!strcmp(a, "--k")) {
            c.k = parse_num(a, v, 1, 4096);
            i++;
        } else if (!strcmp(a, "--max-tokens")) {
            c.max_tokens = parse_num(a, v, 1, 1u << 20);
            i++;
        } else if (!strcmp(a, "--ngram-weight") || !strcmp(a, "--context-weight")) {
            char *end;
            double w = v ? strtod(v, &end) : -1;
            if (!v || *end || !(w >= 0 && w <= 10)) {
                fprintf(stderr, "tartan-hash-encoder: %s needs a number in 0..10\n", a);
                return 2;
            }
            if (a[2] == 'n')
                W_NGRAM = w;
            else
                W_CONTEXT = w;
            i++;
        } else if (!strcmp(a, "--no-stem")) {
            STEM = 0;
        } else if (!strcmp(a, "--sparse")) {
            sparse = 1;
        } else if (!strcmp(a, "--context")) {
            CONTEXT = (int)parse_num(a, v, 0, 16);
            i++;
        } else {
            fprintf(stderr, "tartan-hash-encoder: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!mode || (strcmp(mode, "passage") && strcmp(mode, "query"))) {
        fprintf(stderr, "tartan-hash-encoder: --mode passage|query is required "
                        "(tartan adds it)\n");
        usage(stderr);
        return 2;
    }
    c.query = !strcmp(mode, "query");
    if (!c.max_tokens)
        c.max_tokens = c.query ? 32 : 300;
    uint32_t maxv = c.fixed ? c.k : c.max_tokens;

    static char outbuf[1 << 20];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    char kdesc[32] = "";
    if (c.fixed)
        snprintf(kdesc, sizeof kdesc, " k=%u", c.k);
    /* max_tokens differs by mode (300 passage, 32 query by default): written with the
     * mode prefix that tartan ignores when it compares query and passage encoders
     * (doc/encoder-protocol.md section 2). */
    printf("%s %d %u f32 %u hash-encoder kind=%s dim=%u%s %s:max_tokens=%u stem=%s ngram=%g "
           "context=%d/%g%s (lexical baseline: feature-hashed words, char 3-5-grams, neighbours)\n",
           PROTO_MAGIC, sparse ? 2 : 1, c.dim, maxv, c.fixed ? "fixed" : "token", c.dim, kdesc,
           c.query ? "query" : "passage", c.max_tokens, STEM ? "s" : "none", W_NGRAM, CONTEXT,
           W_CONTEXT, sparse ? " sparse=logtf" : "");
    if (fflush(stdout) != 0)
        die("write failed");

    char *id = malloc(MAX_ID + 1), *text = NULL;
    size_t text_cap = 0;
    tok *toks = malloc(c.max_tokens * sizeof *toks);
    float *vecs = malloc((size_t)maxv * c.dim * sizeof *vecs);
    float *tmp = malloc(c.dim * sizeof *tmp), *tv = malloc(c.dim * sizeof *tv);
    uint32_t *count = malloc(c.k * sizeof *count);
    sterm *sts = sparse ? malloc(c.max_tokens * sizeof *sts) : NULL;
    if (!id || !toks || !vecs || !tmp || !tv || !count || (sparse && !sts))
        die("out of memory");
    uint64_t nrec = 0;
    for (;;) {
        flush_if_input_idle();
        unsigned char b[4];
        if (!read_exact(b, 4))
            break;
        uint32_t idlen = rd32(b);
        if (idlen == 0 || idlen > MAX_ID)
            die("record id length out of range");
        if (!read_exact(id, idlen) || !read_exact(b, 4))
            die("input ends inside a record");
        uint32_t tlen = rd32(b);
        if (tlen > MAX_TEXT)
            die("record text too long");
        if (tlen + 1 > text_cap) {
            text_cap = tlen + 1;
            text = realloc(text, text_cap);
            if (!text)
                die("out of memory");
        }
        if (tlen && !read_exact(text, tlen))
            die("input ends inside a record");
        size_t nt = tokenize(text, tlen, toks, c.max_tokens);
        uint32_t n = 0;
        if (nt == 0) {
            /* An empty or all-stopword text still needs a vector: a fixed "empty" one. */
            memset(vecs, 0, c.dim * sizeof *vecs);
            add_feature(vecs, c.dim, feature_hash('e', "", 0), 1.0);
            normalise(vecs, c.dim);
            n = 1;
        } else if (!c.fixed) {
            for (size_t i = 0; i < nt; i++) {
                float *v = vecs + i * c.dim;
                memset(v, 0, c.dim * sizeof *v);
                token_vector(toks, nt, i, v, tmp, c.dim);
            }
            n = (uint32_t)nt;
        } else {
            memset(vecs, 0, (size_t)c.k * c.dim * sizeof *vecs);
            memset(count, 0, c.k * sizeof *count);
            for (size_t i = 0; i < nt; i++) {
                uint32_t bk = (uint32_t)(mix64(toks[i].word_hash) % c.k);
                memset(tv, 0, c.dim * sizeof *tv);
                token_vector(toks, nt, i, tv, tmp, c.dim);
                for (uint32_t j = 0; j < c.dim; j++)
                    vecs[(size_t)bk * c.dim + j] += tv[j];
                count[bk]++;
            }
            for (uint32_t bk = 0; bk < c.k; bk++) { /* compact the non-empty buckets */
                if (!count[bk])
                    continue;
                if (n != bk)
                    memcpy(vecs + (size_t)n * c.dim, vecs + (size_t)bk * c.dim,
                           c.dim * sizeof *vecs);
                normalise(vecs + (size_t)n * c.dim, c.dim);
                n++;
            }
        }
        write_reply(id, idlen, vecs, n, c.dim);
        if (sparse)
            write_sparse(toks, nt, sts);
        nrec++;
    }
    if (fwrite("DONE", 1, 4, stdout) != 4)
        die("write failed");
    wr32((uint32_t)nrec);
    wr32((uint32_t)(nrec >> 32));
    if (fflush(stdout) != 0)
        die("write failed");
    free(id);
    free(text);
    free(toks);
    free(vecs);
    free(tmp);
    free(tv);
    free(count);
    free(sts);
    return 0;
}
