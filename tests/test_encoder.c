/* Encoder protocol (doc/encoder-protocol.md): JSON/TSV record readers, command
 * splitting, round trips through the fake and the hash encoder, every failure mode
 * with tests/fake_encoder, and tt_encode_to_npy's atomic outputs. */
#include "testutil.h"

#include "encoder/encoder.h"
#include "input/input.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

/* ------------------------------------------------------------ helpers */

static char fake_path[4096], hash_path[4096];

static void find_programs(void) {
    const char *b = getenv("TT_BUILDDIR");
    snprintf(fake_path, sizeof fake_path, "%s/tests/fake_encoder", b ? b : ".");
    snprintf(hash_path, sizeof hash_path, "%s/tartan-hash-encoder", b ? b : ".");
}

/* No child of the test process may be left, zombie or alive. */
static void assert_no_children(void) {
    errno = 0;
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    ck_assert_int_eq(errno, ECHILD);
}

static void assert_msg(const char *needle) {
    const char *m = tt_last_error();
    ck_assert_msg(strstr(m, needle) != NULL, "message lacks \"%s\": %s", needle, m);
}

typedef struct collect {
    uint32_t dim;
    uint64_t nrec;
    char ids[64][32];
    uint32_t n[64];
    float *v;       /* all vectors */
    uint64_t nvec;
    double sumsq_err; /* for unit-norm checks */
    int stop_at;    /* sink fails at this record (-1: never) */
} collect;

static int collect_sink(void *user, uint64_t index, const char *id, size_t id_len, uint32_t n,
                        const float *vec) {
    collect *c = user;
    if (c->stop_at >= 0 && (uint64_t)c->stop_at == index)
        return tt_err(TT_EIO, "sink refuses record %llu", (unsigned long long)index);
    ck_assert_uint_eq(index, c->nrec);
    if (c->nrec < 64) {
        ck_assert_uint_lt(id_len, 32);
        memcpy(c->ids[c->nrec], id, id_len);
        c->ids[c->nrec][id_len] = '\0';
        c->n[c->nrec] = n;
    }
    c->v = realloc(c->v, (size_t)(c->nvec + n) * c->dim * sizeof *c->v);
    memcpy(c->v + c->nvec * c->dim, vec, (size_t)n * c->dim * sizeof *vec);
    c->nvec += n;
    c->nrec++;
    return TT_OK;
}

static void collect_init(collect *c, uint32_t dim) {
    memset(c, 0, sizeof *c);
    c->dim = dim;
    c->stop_at = -1;
}

/* An in-memory record source: ids "r1".."rN", text i has length lens[i % nlens]. */
typedef struct mem_source {
    uint64_t i, n;
    const uint32_t *lens;
    size_t nlens;
    char id[32];
    char *text;
} mem_source;

static int mem_next(void *user, tt_record *rec) {
    mem_source *s = user;
    if (s->i == s->n)
        return 0;
    snprintf(s->id, sizeof s->id, "r%llu", (unsigned long long)s->i + 1);
    rec->id = s->id;
    rec->id_len = strlen(s->id);
    rec->text = s->text;
    rec->text_len = s->lens[s->i % s->nlens];
    s->i++;
    return 1;
}

static char *make_text(size_t n) {
    char *t = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        t[i] = (char)('a' + i % 26);
    t[n] = '\0';
    return t;
}

/* Starts the fake with a behaviour and N, returns the status of start + run over
 * nrec records with the given text lengths. */
static int run_fake(const char *beh, long n, uint64_t nrec, uint32_t timeout_ms,
                    uint32_t expected_dim, collect *c) {
    char nbuf[32];
    snprintf(nbuf, sizeof nbuf, "%ld", n);
    const char *argv[] = {fake_path, beh, nbuf, NULL};
    tt_encoder_options o;
    tt_encoder_options_init(&o);
    o.timeout_ms = timeout_ms;
    o.startup_timeout_ms = timeout_ms;
    o.expected_dim = expected_dim;
    tt_encoder *e = NULL;
    int st = tt_encoder_start_argv(&e, argv, TT_ENC_PASSAGE, &o);
    if (st) {
        ck_assert_ptr_null(e);
        return st;
    }
    static const uint32_t lens[] = {5, 7, 9, 4, 11};
    mem_source src = {0, nrec, lens, 5, "", make_text(64)};
    collect_init(c, tt_encoder_dim(e));
    st = tt_encoder_run(e, mem_next, &src, collect_sink, c);
    tt_encoder_free(e);
    free(src.text);
    return st;
}

/* ------------------------------------------------------------- JSON */

START_TEST(json_fields_escapes) {
    static const char *const keys[3] = {"_id", "text", "title"};
    tt_sbuf v[3] = {{0}};
    int kinds[3];
    size_t col;
    const char *what;
    const char *s = "{\"_id\": \"d\\u00e91\", \"meta\": {\"a\": [1, 2.5e3, true, null, "
                    "{\"x\": \"}\"}]}, \"text\": \"a\\\"b\\\\c\\/\\n\\t\\ud83d\\ude00 \\ud800x\", "
                    "\"title\": null}  ";
    ck_assert_int_eq(tt_json_fields(s, strlen(s), 3, keys, v, kinds, &col, &what), TT_OK);
    ck_assert_int_eq(kinds[0], TT_JSON_STRING);
    ck_assert_int_eq(v[0].len, 4);
    ck_assert(!memcmp(v[0].p, "d\xc3\xa9" "1", 4));
    ck_assert_int_eq(kinds[1], TT_JSON_STRING);
    /* a " b \ c / LF TAB U+1F600 (4 bytes) space U+FFFD (lone high surrogate) x */
    const char want[] = "a\"b\\c/\n\t\xf0\x9f\x98\x80 \xef\xbf\xbdx";
    ck_assert_int_eq(v[1].len, sizeof want - 1);
    ck_assert(!memcmp(v[1].p, want, sizeof want - 1));
    ck_assert_int_eq(kinds[2], TT_JSON_OTHER);

    /* numeric id, repeated key keeps the last value, lone low surrogate */
    s = "{\"_id\": -12.5e+2, \"text\": \"x\", \"text\": \"\\udc00\"}";
    ck_assert_int_eq(tt_json_fields(s, strlen(s), 3, keys, v, kinds, &col, &what), TT_OK);
    ck_assert_int_eq(kinds[0], TT_JSON_NUMBER);
    ck_assert(v[0].len == 8 && !memcmp(v[0].p, "-12.5e+2", 8));
    ck_assert(v[1].len == 3 && !memcmp(v[1].p, "\xef\xbf\xbd", 3));
    ck_assert_int_eq(kinds[2], TT_JSON_ABSENT);

    /* malformed inputs: status, and the column points at the problem */
    static const struct { const char *s; size_t col; } bad[] = {
        {"{\"_id\": \"a\" \"text\": \"b\"}", 12},
        {"{\"_id\": \"a\\q\"}", 10},
        {"{\"_id\": \"abc", 12},
        {"{\"_id\": 01}", 9},
        {"{\"_id\": \"a\"} x", 13},
        {"[1]", 0},
        {"{\"_id\": \"a\tb\"}", 10},
        {"{\"_id\": \"\\u12G4\"}", 11},
        {"{\"a\": [1, 2}", 11},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        what = NULL;
        ck_assert_int_eq(tt_json_fields(bad[i].s, strlen(bad[i].s), 3, keys, v, kinds, &col,
                                        &what), TT_EPARSE);
        ck_assert_ptr_nonnull(what);
        ck_assert_msg(col == bad[i].col, "case %zu: column %zu, want %zu (%s)", i, col,
                      bad[i].col, what);
    }
    /* nesting deeper than the limit is an error, not a stack overflow */
    size_t depth = 100000;
    char *deep = malloc(depth * 2 + 16);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{\"a\": ");
    for (size_t i = 0; i < depth; i++)
        deep[k++] = '[';
    for (size_t i = 0; i < depth; i++)
        deep[k++] = ']';
    deep[k++] = '}';
    ck_assert_int_eq(tt_json_fields(deep, k, 3, keys, v, kinds, &col, &what), TT_EPARSE);
    ck_assert_str_eq(what, "nesting too deep");
    free(deep);
    for (int i = 0; i < 3; i++)
        tt_sbuf_free(&v[i]);
}
END_TEST

/* -------------------------------------------------------- records */

static char *write_tmp(const char *dir, const char *name, const char *content) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    ck_assert_int_eq(tu_write_file(p, content, strlen(content)), 0);
    return p;
}

static void expect_record(tt_records *r, const char *id, const char *text) {
    tt_record rec;
    int st = tt_records_next(r, &rec);
    ck_assert_msg(st == 1, "expected a record, got %d: %s", st, tt_last_error());
    ck_assert_int_eq(rec.id_len, strlen(id));
    ck_assert(!memcmp(rec.id, id, rec.id_len));
    ck_assert_int_eq(rec.text_len, strlen(text));
    ck_assert(!memcmp(rec.text, text, rec.text_len));
}

START_TEST(records_jsonl_tsv) {
    char *dir = tu_tmpdir();
    char *j = write_tmp(dir, "corpus.jsonl",
                        "{\"_id\": \"d1\", \"title\": \"Title One\", \"text\": \"body one\"}\n"
                        "\n"
                        "{\"_id\": \"d2\", \"title\": \"\", \"text\": \"body two\", "
                        "\"metadata\": {}}\r\n"
                        "{\"_id\": 3, \"text\": \"caf\\u00e9\"}\n");
    tt_records *r;
    ck_assert_int_eq(tt_records_open(&r, j, TT_REC_AUTO, TT_ENC_PASSAGE), TT_OK);
    expect_record(r, "d1", "Title One body one");
    expect_record(r, "d2", "body two");
    ck_assert_int_eq(tt_records_line(r), 3);
    expect_record(r, "3", "caf\xc3\xa9");
    tt_record rec;
    ck_assert_int_eq(tt_records_next(r, &rec), 0);
    ck_assert_int_eq(tt_records_format(r), TT_REC_JSONL);
    tt_records_close(r);
    ck_assert_uint_eq(tt_records_count(j, TT_REC_AUTO), 3);

    /* query mode ignores titles */
    ck_assert_int_eq(tt_records_open(&r, j, TT_REC_AUTO, TT_ENC_QUERY), TT_OK);
    expect_record(r, "d1", "body one");
    tt_records_close(r);

    /* TSV: header skipped, 2 and 3 columns, sniffed by content without an extension */
    char *t = write_tmp(dir, "collection", "id\ttext\ttitle\nq1\tfirst text\n"
                                           "q2\tsecond text\tA Title\textra\n");
    ck_assert_int_eq(tt_records_open(&r, t, TT_REC_AUTO, TT_ENC_PASSAGE), TT_OK);
    expect_record(r, "q1", "first text");
    expect_record(r, "q2", "A Title second text");
    ck_assert_int_eq(tt_records_next(r, &rec), 0);
    ck_assert_int_eq(tt_records_format(r), TT_REC_TSV);
    tt_records_close(r);
    ck_assert_uint_eq(tt_records_count(t, TT_REC_AUTO), 2);

    /* errors name file:line */
    static const struct { const char *content, *needle; } bad[] = {
        {"{\"_id\": \"a\", \"text\": \"x\"}\n{\"_id\": \"b\", \"text\": }\n", "bad.jsonl:2:"},
        {"{\"text\": \"x\"}\n", "no \"_id\""},
        {"{\"_id\": \"a\"}\n", "no \"text\""},
        {"{\"_id\": \"a\\nb\", \"text\": \"x\"}\n", "whitespace"},
        {"{\"_id\": \"a\\u0001b\", \"text\": \"x\"}\n", "control character"},
        {"{\"_id\": \"a b\", \"text\": \"x\"}\n", "whitespace"},
        {"{\"_id\": \"\", \"text\": \"x\"}\n", "empty id"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *b = write_tmp(dir, "bad.jsonl", bad[i].content);
        ck_assert_int_eq(tt_records_open(&r, b, TT_REC_AUTO, TT_ENC_PASSAGE), TT_OK);
        int st;
        while ((st = tt_records_next(r, &rec)) == 1) {
        }
        ck_assert_int_eq(st, TT_EPARSE);
        assert_msg(bad[i].needle);
        assert_msg("bad.jsonl");
        tt_records_close(r);
        free(b);
    }
    char *b = write_tmp(dir, "bad.tsv", "a\tb\nno tab here\n");
    ck_assert_int_eq(tt_records_open(&r, b, TT_REC_AUTO, TT_ENC_PASSAGE), TT_OK);
    ck_assert_int_eq(tt_records_next(r, &rec), 1);
    ck_assert_int_eq(tt_records_next(r, &rec), TT_EPARSE);
    assert_msg("bad.tsv:2");
    tt_records_close(r);
    free(b);

    char missing[4200];
    snprintf(missing, sizeof missing, "%s/nope.jsonl", dir);
    ck_assert_int_eq(tt_records_open(&r, missing, TT_REC_AUTO, TT_ENC_PASSAGE), TT_ENOTFOUND);
    assert_msg("nope.jsonl");
    free(j);
    free(t);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(split_command) {
    char **argv;
    size_t argc;
    ck_assert_int_eq(tt_split_command("  python3  enc.py --x 'a b' \"c \\\"d\\\" \\\\\" e\\ f ''",
                                      &argv, &argc), TT_OK);
    ck_assert_int_eq(argc, 7);
    ck_assert_str_eq(argv[0], "python3");
    ck_assert_str_eq(argv[1], "enc.py");
    ck_assert_str_eq(argv[2], "--x");
    ck_assert_str_eq(argv[3], "a b");
    ck_assert_str_eq(argv[4], "c \"d\" \\");
    ck_assert_str_eq(argv[5], "e f");
    ck_assert_str_eq(argv[6], "");
    ck_assert_ptr_null(argv[7]);
    tt_argv_free(argv);
    ck_assert_int_eq(tt_split_command("a 'b", &argv, &argc), TT_EINVAL);
    ck_assert_int_eq(tt_split_command("a \"b", &argv, &argc), TT_EINVAL);
    ck_assert_int_eq(tt_split_command("a b\\", &argv, &argc), TT_EINVAL);
    ck_assert_int_eq(tt_split_command("   ", &argv, &argc), TT_EINVAL);
    ck_assert_ptr_null(argv);
}
END_TEST

/* ------------------------------------------------------ round trips */

static void check_fake_values(const collect *c, uint64_t nrec, const uint32_t *lens,
                              size_t nlens) {
    ck_assert_uint_eq(c->nrec, nrec);
    uint64_t v = 0;
    for (uint64_t r = 0; r < nrec; r++) {
        uint32_t L = lens[r % nlens], n = 1 + L % 3;
        if (r < 64) {
            char id[32];
            snprintf(id, sizeof id, "r%llu", (unsigned long long)r + 1);
            ck_assert_str_eq(c->ids[r], id);
            ck_assert_uint_eq(c->n[r], n);
        }
        for (uint32_t i = 0; i < n; i++, v++)
            for (uint32_t j = 0; j < c->dim; j++)
                ck_assert_float_eq(c->v[v * c->dim + j],
                                   (float)((L + 3 * i + j) % 13) - 6.0f + 0.25f);
    }
    ck_assert_uint_eq(v, c->nvec);
}

START_TEST(roundtrip_fake) {
    static const char *const behs[] = {"ok", "ok16", "slow", "spam"};
    for (int b = 0; b < 4; b++) {
        const char *argv[] = {fake_path, behs[b], NULL};
        tt_encoder_options o;
        tt_encoder_options_init(&o);
        o.timeout_ms = 1000; /* "slow" takes 150 ms per record: > 1 s in total, fine */
        tt_encoder *e;
        ck_assert_msg(tt_encoder_start_argv(&e, argv, TT_ENC_QUERY, &o) == TT_OK, "%s",
                      tt_last_error());
        ck_assert_uint_eq(tt_encoder_dim(e), 8);
        ck_assert_uint_eq(tt_encoder_max_vectors(e), 3);
        ck_assert_int_eq(tt_encoder_dtype(e), b == 1 ? TT_ENC_F16 : TT_ENC_F32);
        char want[64];
        snprintf(want, sizeof want, "fake encoder (%s)", behs[b]);
        ck_assert_str_eq(tt_encoder_description(e), want);
        static const uint32_t lens[] = {0, 1, 2, 13, 50};
        uint64_t nrec = b == 2 ? 9 : 40;
        mem_source src = {0, nrec, lens, 5, "", make_text(64)};
        collect c;
        collect_init(&c, 8);
        ck_assert_msg(tt_encoder_run(e, mem_next, &src, collect_sink, &c) == TT_OK, "%s",
                      tt_last_error());
        check_fake_values(&c, nrec, lens, 5);
        /* one run per session */
        ck_assert_int_eq(tt_encoder_run(e, mem_next, &src, collect_sink, &c), TT_EINVAL);
        if (b == 3) {
            const char *tail = tt_encoder_stderr_tail(e);
            ck_assert_uint_le(strlen(tail), TT_ENC_STDERR_KEEP);
            ck_assert_ptr_nonnull(strstr(tail, "fake: last spam line"));
            ck_assert_ptr_null(strstr(tail, "progress line 0 "));
        }
        tt_encoder_free(e);
        free(c.v);
        free(src.text);
        assert_no_children();
    }
}
END_TEST

/* Many large records: both pipes fill up, so this only passes if tartan reads replies
 * while it writes and the fake reads batches while tartan waits (back-pressure). */
static int count_sink(void *user, uint64_t index, const char *id, size_t id_len, uint32_t n,
                      const float *vec) {
    uint64_t *cnt = user;
    ck_assert_uint_eq(index, *cnt);
    ck_assert_uint_eq(n, 1 + (uint32_t)(20000 + index % 7) % 3);
    (void)id;
    (void)id_len;
    (void)vec;
    (*cnt)++;
    return TT_OK;
}

START_TEST(backpressure) {
    const char *argv[] = {fake_path, "ok", NULL};
    tt_encoder *e;
    ck_assert_int_eq(tt_encoder_start_argv(&e, argv, TT_ENC_PASSAGE, NULL), TT_OK);
    static const uint32_t lens[] = {20000, 20001, 20002, 20003, 20004, 20005, 20006};
    mem_source src = {0, 3000, lens, 7, "", make_text(20006)};
    uint64_t cnt = 0;
    double t0 = tt_now();
    ck_assert_msg(tt_encoder_run(e, mem_next, &src, count_sink, &cnt) == TT_OK, "%s",
                  tt_last_error());
    ck_assert_uint_eq(cnt, 3000);
    fprintf(stderr, "backpressure: 3000 records, 60 MB of text in %.2f s\n", tt_now() - t0);
    tt_encoder_free(e);
    free(src.text);
    assert_no_children();
}
END_TEST

START_TEST(roundtrip_hash) {
    char *dir = tu_tmpdir();
    char *in = write_tmp(dir, "c.tsv", "a\tThe stem cells divide quickly\n"
                                       "b\tStem cell division in mice\n"
                                       "c\tthe the the\n"
                                       "d\tQuantum chromodynamics of quarks\n");
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "'%s' --kind token --dim 64", hash_path);
    collect runs[2];
    for (int k = 0; k < 2; k++) {
        tt_encoder *e;
        ck_assert_msg(tt_encoder_start(&e, cmd, TT_ENC_PASSAGE, NULL) == TT_OK, "%s",
                      tt_last_error());
        ck_assert_uint_eq(tt_encoder_dim(e), 64);
        ck_assert_ptr_nonnull(strstr(tt_encoder_description(e), "hash"));
        collect_init(&runs[k], 64);
        ck_assert_msg(tt_encoder_encode_file(e, in, collect_sink, &runs[k]) == TT_OK, "%s",
                      tt_last_error());
        tt_encoder_free(e);
    }
    collect *c = &runs[0];
    ck_assert_uint_eq(c->nrec, 4);
    ck_assert_str_eq(c->ids[0], "a");
    ck_assert_str_eq(c->ids[3], "d");
    /* one vector per non-stopword token ("the" dropped); a text of only stopwords
     * still gets one vector */
    ck_assert_uint_eq(c->n[0], 4);
    ck_assert_uint_eq(c->n[1], 4);
    ck_assert_uint_eq(c->n[2], 1);
    ck_assert_uint_eq(c->n[3], 3);
    /* deterministic, unit norm */
    ck_assert_uint_eq(runs[1].nvec, c->nvec);
    ck_assert(!memcmp(c->v, runs[1].v, (size_t)c->nvec * 64 * sizeof(float)));
    for (uint64_t i = 0; i < c->nvec; i++) {
        double s = 0;
        for (int j = 0; j < 64; j++)
            s += (double)c->v[i * 64 + j] * c->v[i * 64 + j];
        ck_assert_double_eq_tol(s, 1.0, 1e-5);
    }
    /* lexical: "stem" (a[0]) is closest to "stem" (b[0]); "cells" (a[1]) is closer to
     * "cell" (b[1], shared n-grams) than to "quarks" (d[2]) */
    const float *a0 = c->v, *a1 = c->v + 64, *b0 = c->v + 4 * 64, *b1 = c->v + 5 * 64;
    const float *d2 = c->v + 11 * 64;
    double s_stem = 0, s_cell = 0, s_quark = 0;
    for (int j = 0; j < 64; j++) {
        s_stem += (double)a0[j] * b0[j];
        s_cell += (double)a1[j] * b1[j];
        s_quark += (double)a1[j] * d2[j];
    }
    ck_assert_msg(s_stem > 0.6, "stem/stem %.3f", s_stem);
    ck_assert_msg(s_cell > s_quark + 0.2, "cells/cell %.3f cells/quarks %.3f", s_cell, s_quark);
    free(runs[0].v);
    free(runs[1].v);
    free(in);
    tu_rmrf(dir);
    free(dir);
    assert_no_children();
}
END_TEST

/* ------------------------------------------------------ failure modes */

START_TEST(fail_not_found) {
    tt_encoder *e = (tt_encoder *)1;
    ck_assert_int_eq(tt_encoder_start(&e, "tartan-no-such-encoder --x", TT_ENC_PASSAGE, NULL),
                     TT_ENOTFOUND);
    ck_assert_ptr_null(e);
    assert_msg("tartan-no-such-encoder");
    ck_assert_int_eq(tt_encoder_start(&e, "/nonexistent/dir/enc", TT_ENC_PASSAGE, NULL),
                     TT_ENOTFOUND);
    assert_msg("/nonexistent/dir/enc");
    /* through a shell: exit status 127 before the hello reads as not found too */
    ck_assert_int_eq(tt_encoder_start(&e, "sh -c 'tartan-no-such-encoder'", TT_ENC_PASSAGE,
                                      NULL), TT_ENOTFOUND);
    assert_msg("127");
    assert_msg("tartan-no-such-encoder"); /* from sh's stderr */
    /* not executable */
    ck_assert_int_eq(tt_encoder_start(&e, "/etc/hostname", TT_ENC_PASSAGE, NULL), TT_EENCODER);
    assert_msg("/etc/hostname");
    ck_assert_int_eq(tt_encoder_start(&e, "", TT_ENC_PASSAGE, NULL), TT_EINVAL);
    ck_assert_int_eq(tt_encoder_start(&e, "x", 7, NULL), TT_EINVAL);
    assert_no_children();
}
END_TEST

typedef struct fail_case {
    const char *beh;
    long n;
    uint64_t nrec;
    uint32_t timeout_ms, expected_dim;
    int status;
    const char *needles[4];
} fail_case;

/* Records are r1..rN; "record #3 'r3'" is the third. Each case checks the status, the
 * record/ids named, and the fake's stderr line. */
static const fail_case fail_cases[] = {
    {"exit3", -1, 5, 5000, 0, TT_EENCODER,
     {"exited with status 3", "before its hello", "fake: failing with status 3", fake_path}},
    {"exit3", 2, 5, 5000, 0, TT_EENCODER,
     {"exited with status 3", "record #3 'r3'", "fake: failing with status 3", NULL}},
    {"die", 3, 10, 5000, 0, TT_EENCODER,
     {"killed by signal 9", "record #4 'r4'", "partial reply", "fake: dying mid-stream"}},
    {"hang", 2, 5, 1000, 0, TT_ETIMEOUT,
     {"no progress for 1.0 s", "record #3 'r3'", "fake: hanging", "killed"}},
    {"hanghello", 0, 5, 1000, 0, TT_ETIMEOUT,
     {"no hello line within 1.0 s", "fake: never saying hello", NULL, NULL}},
    {"garbage", 0, 5, 5000, 0, TT_EENCODER,
     {"expected the hello line", "\"Loading model we\"", "fake: printing to stdout", NULL}},
    {"garbage_mid", 4, 9, 5000, 0, TT_EENCODER,
     {"garbage on stdout", "after 4 replies", "\"oops, a debug pr\"", "fake: writing garbage"}},
    {"absurd", 1, 5, 5000, 0, TT_EENCODER,
     {"reply 2 (id 'r2')", "max_vectors", "fake: writing an absurd vector count", NULL}},
    {"dim", 16, 5, 5000, 8, TT_EDIM,
     {"produces 16-dimensional vectors but 8 are required", NULL, NULL, NULL}},
    {"shortvec", 2, 6, 5000, 0, TT_EENCODER,
     {"garbage on stdout", "lost its framing", "8 values of f32", "fake: writing too few values"}},
    {"skip", 2, 6, 5000, 0, TT_EENCODER,
     {"expected the reply to record #3 'r3' but got id 'r4'", "fake: skipping a record", NULL,
      NULL}},
    {"skip", 5, 6, 5000, 0, TT_EENCODER,
     {"wrong record count", "record #6 'r6'", "fake: skipping a record", NULL}},
    {"swap", 3, 6, 5000, 0, TT_EENCODER,
     {"expected the reply to record #4 'r4' but got id 'r5'", "fake: swapping two replies",
      NULL, NULL}},
    {"extra", 0, 4, 5000, 0, TT_EENCODER,
     {"too many replies", "id 'bogus'", "fake: writing an extra reply", NULL}},
    {"badcount", 0, 4, 5000, 0, TT_EENCODER,
     {"end marker says 5 replies but it wrote 4", NULL, NULL, NULL}},
    {"nan", 3, 6, 5000, 0, TT_EVALUE,
     {"record #4 'r4'", "vector 1 of", "NaN or Inf", "fake: writing a NaN"}},
    {"noend", 0, 4, 5000, 0, TT_EENCODER,
     {"exited with status 0", "end marker", "fake: exiting without the end marker", NULL}},
    {"exitafter", 0, 4, 5000, 0, TT_EENCODER,
     {"exited with status 5 after answering all 4 records", "fake: exiting with status 5",
      NULL, NULL}},
    {"trailing", 0, 4, 5000, 0, TT_EENCODER,
     {"trailing bytes after its end marker", "\"bye\"", "fake: writing bytes", NULL}},
    {"version", 0, 4, 5000, 0, TT_EVERSION, {"protocol version 3", NULL, NULL, NULL}},
};

START_TEST(fail_modes) {
    const fail_case *fc = &fail_cases[_i];
    collect c;
    c.v = NULL;
    double t0 = tt_now();
    int st = run_fake(fc->beh, fc->n, fc->nrec, fc->timeout_ms, fc->expected_dim, &c);
    double dt = tt_now() - t0;
    ck_assert_msg(st == fc->status, "%s %ld: status %d (%s), want %d: %s", fc->beh, fc->n, st,
                  tt_strerror(st), fc->status, tt_last_error());
    if (getenv("TT_SHOW_MESSAGES"))
        fprintf(stderr, "--- %s %ld:\n%s\n", fc->beh, fc->n, tt_last_error());
    for (int k = 0; k < 4 && fc->needles[k]; k++)
        assert_msg(fc->needles[k]);
    /* timeouts are honoured promptly */
    ck_assert_msg(dt < fc->timeout_ms / 1000.0 + 3.0, "%s took %.2f s", fc->beh, dt);
    free(c.v);
    assert_no_children();
}
END_TEST

/* The encoder closes stdin early while tartan still has megabytes to send: tartan gets
 * EPIPE, must not die of SIGPIPE (default disposition here), must leave no pending
 * SIGPIPE and its signal mask unchanged, and must report the early end. */
START_TEST(fail_closed_stdin_no_sigpipe) {
    signal(SIGPIPE, SIG_DFL);
    sigset_t before, after, pending;
    pthread_sigmask(SIG_SETMASK, NULL, &before);
    const char *argv[] = {fake_path, "closein", "3", NULL};
    tt_encoder *e;
    ck_assert_int_eq(tt_encoder_start_argv(&e, argv, TT_ENC_PASSAGE, NULL), TT_OK);
    static const uint32_t lens[] = {100000};
    mem_source src = {0, 200, lens, 1, "", make_text(100000)};
    collect c;
    collect_init(&c, 8);
    int st = tt_encoder_run(e, mem_next, &src, collect_sink, &c);
    ck_assert_msg(st == TT_EENCODER, "%d %s", st, tt_last_error());
    assert_msg("fake: closing stdin early");
    ck_assert_uint_eq(c.nrec, 3);
    tt_encoder_free(e);
    pthread_sigmask(SIG_SETMASK, NULL, &after);
    ck_assert_int_eq(sigismember(&before, SIGPIPE), sigismember(&after, SIGPIPE));
    sigpending(&pending);
    ck_assert_int_eq(sigismember(&pending, SIGPIPE), 0);
    free(c.v);
    free(src.text);
    assert_no_children();
}
END_TEST

/* A helper process started by the encoder dies with it (process-group kill). */
START_TEST(fail_hang_kills_group) {
    const char *argv[] = {fake_path, "hangchild", NULL};
    tt_encoder_options o;
    tt_encoder_options_init(&o);
    o.startup_timeout_ms = 800;
    tt_encoder *e;
    ck_assert_int_eq(tt_encoder_start_argv(&e, argv, TT_ENC_PASSAGE, &o), TT_ETIMEOUT);
    const char *p = strstr(tt_last_error(), "fake: child ");
    ck_assert_ptr_nonnull(p);
    long child = atol(p + strlen("fake: child "));
    ck_assert_int_gt(child, 1);
    /* gone, or at worst a zombie waiting for its new parent to reap it */
    bool dead = false;
    for (int k = 0; k < 200 && !dead; k++) {
        char path[64], buf[512] = "";
        snprintf(path, sizeof path, "/proc/%ld/stat", child);
        FILE *f = fopen(path, "r");
        if (!f) {
            dead = true;
            break;
        }
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')');
        dead = rp && (rp[2] == 'Z' || rp[2] == 'X');
        if (!dead)
            usleep(10000);
    }
    ck_assert_msg(dead, "helper process %ld survived", child);
    assert_no_children();
}
END_TEST

/* A source whose second record has a bad id, or which fails at its third call. */
static int bad_source(void *user, tt_record *rec) {
    int *calls = user;
    (*calls)++;
    if (*calls == 3)
        return tt_err(TT_EIO, "source broke at call 3");
    rec->id = *calls == 2 ? "x\ty" : "ok";
    rec->id_len = strlen(rec->id);
    rec->text = "text";
    rec->text_len = 4;
    return 1;
}

static int bad_source_io(void *user, tt_record *rec) {
    int *calls = user;
    if (*calls == 1) { /* skip the bad id: ids "ok", "ok", then failure */
        (*calls)++;
    }
    return bad_source(user, rec);
}

START_TEST(fail_sink_and_source_errors) {
    /* the sink's status and message win; the encoder is killed and reaped */
    const char *argv[] = {fake_path, "ok", NULL};
    tt_encoder *e;
    ck_assert_int_eq(tt_encoder_start_argv(&e, argv, TT_ENC_PASSAGE, NULL), TT_OK);
    static const uint32_t lens[] = {3};
    mem_source src = {0, 20, lens, 1, "", make_text(8)};
    collect c;
    collect_init(&c, 8);
    c.stop_at = 5;
    ck_assert_int_eq(tt_encoder_run(e, mem_next, &src, collect_sink, &c), TT_EIO);
    assert_msg("sink refuses record 5");
    tt_encoder_free(e);
    free(c.v);
    assert_no_children();
    /* a custom source giving an id with a TAB */
    int calls = 0;
    ck_assert_int_eq(tt_encoder_start_argv(&e, argv, TT_ENC_PASSAGE, NULL), TT_OK);
    collect_init(&c, 8);
    ck_assert_int_eq(tt_encoder_run(e, bad_source, &calls, collect_sink, &c), TT_EINVAL);
    assert_msg("record #2");
    assert_msg("whitespace");
    tt_encoder_free(e);
    free(c.v);
    assert_no_children();
    /* a source failing: its status and message come back */
    calls = 0;
    ck_assert_int_eq(tt_encoder_start_argv(&e, argv, TT_ENC_PASSAGE, NULL), TT_OK);
    collect_init(&c, 8);
    ck_assert_int_eq(tt_encoder_run(e, bad_source_io, &calls, collect_sink, &c), TT_EIO);
    assert_msg("source broke at call 3");
    tt_encoder_free(e);
    free(c.v);
    free(src.text);
    assert_no_children();
}
END_TEST

/* ---------------------------------------------------- tt_encode_to_npy */

static bool exists(const char *prefix, const char *suffix) {
    char p[4300];
    snprintf(p, sizeof p, "%s%s", prefix, suffix);
    struct stat sb;
    return stat(p, &sb) == 0;
}

static char *slurp(const char *prefix, const char *suffix) {
    char p[4300];
    snprintf(p, sizeof p, "%s%s", prefix, suffix);
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

START_TEST(encode_to_npy) {
    char *dir = tu_tmpdir();
    char *in = write_tmp(dir, "q.jsonl", "{\"_id\": \"q1\", \"text\": \"abcd\"}\n"
                                         "{\"_id\": \"q2\", \"text\": \"abcde\"}\n"
                                         "{\"_id\": \"q3\", \"text\": \"abcdef\"}\n");
    char prefix[4200], cmd[4300];
    snprintf(prefix, sizeof prefix, "%s/out", dir);
    snprintf(cmd, sizeof cmd, "'%s' ok", fake_path);
    tt_encode_stats stats;
    ck_assert_msg(tt_encode_to_npy(cmd, in, TT_ENC_QUERY, prefix, NULL, &stats) == TT_OK, "%s",
                  tt_last_error());
    ck_assert_uint_eq(stats.records, 3);
    ck_assert_uint_eq(stats.vectors, 2 + 3 + 1);
    ck_assert_uint_eq(stats.dim, 8);
    ck_assert_str_eq(stats.description, "fake encoder (ok)");
    char p[4300];
    snprintf(p, sizeof p, "%s.vectors.npy", prefix);
    float *v;
    tt_npy_header h;
    ck_assert_int_eq(tt_npy_read_floats(p, &v, &h), TT_OK);
    ck_assert_int_eq(h.ndim, 2);
    ck_assert_uint_eq(h.shape[0], 6);
    ck_assert_uint_eq(h.shape[1], 8);
    /* record q2 (L = 5): its first vector is row 2, v[j] = ((5 + j) % 13) - 5.75 */
    for (int j = 0; j < 8; j++)
        ck_assert_float_eq(v[2 * 8 + j], (float)((5 + j) % 13) - 5.75f);
    free(v);
    snprintf(p, sizeof p, "%s.doclens.npy", prefix);
    int64_t *lens;
    uint64_t nl;
    ck_assert_int_eq(tt_npy_read_ints(p, &lens, &nl), TT_OK);
    ck_assert_uint_eq(nl, 3);
    ck_assert(lens[0] == 2 && lens[1] == 3 && lens[2] == 1);
    free(lens);
    char *ids = slurp(prefix, ".ids.txt");
    ck_assert_str_eq(ids, "q1\nq2\nq3\n");
    free(ids);
    char *desc = slurp(prefix, ".encoder.txt");
    ck_assert_str_eq(desc, "fake encoder (ok)\n");
    free(desc);
    assert_no_children();

    /* outputs exist: refused without force, and left alone */
    ck_assert_int_eq(tt_encode_to_npy(cmd, in, TT_ENC_QUERY, prefix, NULL, NULL), TT_EEXIST);
    assert_msg("out.vectors.npy");
    /* a failing run with force leaves the old outputs intact and no temporaries */
    tt_encoder_options o;
    tt_encoder_options_init(&o);
    o.force = 1;
    snprintf(cmd, sizeof cmd, "'%s' nan 1", fake_path);
    ck_assert_int_eq(tt_encode_to_npy(cmd, in, TT_ENC_QUERY, prefix, &o, &stats), TT_EVALUE);
    assert_msg("record #2 'q2'");
    ck_assert_ptr_nonnull(strstr(stats.stderr_tail, "fake: writing a NaN"));
    ids = slurp(prefix, ".ids.txt");
    ck_assert_str_eq(ids, "q1\nq2\nq3\n");
    free(ids);
    static const char *const sfx[] = {".vectors.npy.tmp", ".doclens.npy.tmp", ".ids.txt.tmp",
                                      ".encoder.txt.tmp"};
    for (int k = 0; k < 4; k++)
        ck_assert_msg(!exists(prefix, sfx[k]), "%s left behind", sfx[k]);
    /* zero vectors for a record is refused by name */
    snprintf(cmd, sizeof cmd, "'%s' zero 2", fake_path);
    ck_assert_int_eq(tt_encode_to_npy(cmd, in, TT_ENC_QUERY, prefix, &o, NULL), TT_EVALUE);
    assert_msg("record #3 'q3'");
    assert_msg("0 vectors");
    /* a failing fresh run leaves nothing at all */
    char prefix2[4300];
    snprintf(prefix2, sizeof prefix2, "%s/fresh", dir);
    snprintf(cmd, sizeof cmd, "'%s' die 1", fake_path);
    ck_assert_int_eq(tt_encode_to_npy(cmd, in, TT_ENC_QUERY, prefix2, NULL, NULL), TT_EENCODER);
    static const char *const fin[] = {".vectors.npy", ".doclens.npy", ".ids.txt",
                                      ".encoder.txt"};
    for (int k = 0; k < 4; k++) {
        ck_assert(!exists(prefix2, fin[k]));
        ck_assert(!exists(prefix2, sfx[k]));
    }
    /* force replaces on success */
    snprintf(cmd, sizeof cmd, "'%s' ok16", fake_path);
    ck_assert_int_eq(tt_encode_to_npy(cmd, in, TT_ENC_QUERY, prefix, &o, NULL), TT_OK);
    desc = slurp(prefix, ".encoder.txt");
    ck_assert_str_eq(desc, "fake encoder (ok16)\n");
    free(desc);
    /* a missing input: the encoder started for it is reaped */
    snprintf(p, sizeof p, "%s/missing.jsonl", dir);
    ck_assert_int_eq(tt_encode_to_npy(cmd, p, TT_ENC_QUERY, prefix2, NULL, NULL), TT_ENOTFOUND);
    assert_msg("missing.jsonl");
    for (int k = 0; k < 4; k++)
        ck_assert(!exists(prefix2, fin[k]));
    assert_no_children();
    free(in);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

int main(void) {
    find_programs();
    if (access(fake_path, X_OK) != 0) {
        fprintf(stderr, "%s not built\n", fake_path);
        return 99;
    }
    Suite *s = suite_create("encoder");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, json_fields_escapes);
    tcase_add_test(tc, records_jsonl_tsv);
    tcase_add_test(tc, split_command);
    suite_add_tcase(s, tc);
    tc = tcase_create("protocol");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, roundtrip_fake);
    tcase_add_test(tc, backpressure);
    if (access(hash_path, X_OK) == 0)
        tcase_add_test(tc, roundtrip_hash);
    else
        fprintf(stderr, "skipping roundtrip_hash: %s not built\n", hash_path);
    suite_add_tcase(s, tc);
    tc = tcase_create("failures");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fail_not_found);
    tcase_add_loop_test(tc, fail_modes, 0, (int)(sizeof fail_cases / sizeof fail_cases[0]));
    tcase_add_test(tc, fail_closed_stdin_no_sigpipe);
    tcase_add_test(tc, fail_hang_kills_group);
    tcase_add_test(tc, fail_sink_and_source_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("npy");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, encode_to_npy);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
