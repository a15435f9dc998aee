/* Unit tests of the report writers (tools/report_write.c): variant names, byte units,
 * axis ticks, and the Markdown / CSV / JSON / SVG of a hand-made report whose every
 * number is chosen here, so each expected cell is derived by hand below. */
#include "testutil.h"

#include "../tools/report.h"

static char *render(int (*fn)(FILE *, const rp_report *), const rp_report *r) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fn(f, r), 0);
    ck_assert_int_eq(fclose(f), 0);
    return buf;
}

static size_t count(const char *s, const char *needle) {
    size_t n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

START_TEST(variant_names) {
    rp_variant v;
    char lab[64];
    tt_build_options bo;
    tt_build_options_init(&bo);
    ck_assert(rp_parse_variant("original", &v));
    ck_assert(v.original && v.nbits == 0 && v.pool == 1);
    ck_assert_str_eq(rp_variant_label(&v, lab, sizeof lab), "original (float16)");
    ck_assert(isnan(v.p[0]) && isnan(v.recall));
    ck_assert(rp_parse_variant("exact", &v));
    ck_assert(v.original);
    ck_assert_str_eq(v.name, "original");
    /* No codec named: the library's default, and the canonical name leaves it out. */
    ck_assert(rp_parse_variant("2bit", &v));
    ck_assert(!v.original && v.nbits == 2 && v.codec == bo.codec_tables && v.pool == 1);
    ck_assert_str_eq(v.name, "2bit");
    ck_assert(rp_parse_variant("4bit-perdim", &v));
    ck_assert(v.codec == TT_CODEC_PER_DIM);
    ck_assert(rp_parse_variant("4bit-per-dim", &v));
    ck_assert(v.codec == TT_CODEC_PER_DIM);
    ck_assert_str_eq(rp_variant_label(&v, lab, sizeof lab), "4-bit (per-dim tables)");
    ck_assert(rp_parse_variant("1bit-shared", &v));
    ck_assert(v.nbits == 1 && v.codec == TT_CODEC_SHARED);
    ck_assert_str_eq(v.name, "1bit-shared");
    ck_assert_str_eq(rp_variant_label(&v, lab, sizeof lab), "1-bit (shared table)");
    ck_assert(rp_parse_variant("2bit-adaptive", &v));
    ck_assert(v.nbits == 2 && v.codec == TT_CODEC_ADAPTIVE && v.pool == 1);
    ck_assert_str_eq(rp_variant_label(&v, lab, sizeof lab), "2-bit (adaptive bits)");
    ck_assert(rp_parse_variant("2bit-adaptive-pool3", &v));
    ck_assert(v.codec == TT_CODEC_ADAPTIVE && v.pool == 3);
    ck_assert_str_eq(v.name, bo.codec_tables == TT_CODEC_ADAPTIVE ? "2bit-pool3"
                                                                   : "2bit-adaptive-pool3");
    ck_assert_str_eq(rp_variant_label(&v, lab, sizeof lab), "2-bit (adaptive bits, pool 3)");
    ck_assert(rp_parse_variant("1bit-pool2", &v));
    ck_assert(v.nbits == 1 && v.codec == bo.codec_tables && v.pool == 2);
    ck_assert_str_eq(v.name, "1bit-pool2");
    ck_assert(rp_parse_variant("2bit-shared-pool64", &v));
    ck_assert(v.pool == 64 && v.codec == TT_CODEC_SHARED);
    ck_assert_str_eq(v.name, "2bit-shared-pool64");
    /* how residuals are debiased: the build's default (auto) unless named, after the
     * codec and before pooling; per-vector scales need the adaptive codec */
    ck_assert(rp_parse_variant("2bit", &v) && v.debias == TT_DEBIAS_AUTO);
    ck_assert(rp_parse_variant("original", &v) && v.debias == TT_DEBIAS_AUTO);
    ck_assert(rp_parse_variant("1bit-vector", &v));
    ck_assert(v.nbits == 1 && v.debias == TT_DEBIAS_VECTOR && v.codec == bo.codec_tables);
    ck_assert_str_eq(v.name, "1bit-vector");
    ck_assert_str_eq(rp_variant_label(&v, lab, sizeof lab), "1-bit (adaptive bits, vector scales)");
    ck_assert(rp_parse_variant("2bit-adaptive-table-pool2", &v));
    ck_assert(v.debias == TT_DEBIAS_TABLE && v.pool == 2);
    ck_assert_str_eq(v.name, bo.codec_tables == TT_CODEC_ADAPTIVE ? "2bit-table-pool2"
                                                                   : "2bit-adaptive-table-pool2");
    ck_assert_str_eq(rp_variant_label(&v, lab, sizeof lab),
                     "2-bit (adaptive bits, table scales, pool 2)");
    ck_assert(rp_parse_variant("4bit-perdim-nodebias", &v));
    ck_assert(v.debias == TT_DEBIAS_NONE && v.codec == TT_CODEC_PER_DIM);
    ck_assert_str_eq(v.name, "4bit-perdim-nodebias");
    ck_assert(!rp_parse_variant("2bit-perdim-vector", &v));
    ck_assert(!rp_parse_variant("2bit-vector-adaptive", &v)); /* codec first */
    ck_assert(!rp_parse_variant("2bit-vectors", &v));
    /* one cut for the collection: a decimal factor > 1, canonical as %g */
    ck_assert(rp_parse_variant("2bit-gpool2.5", &v));
    ck_assert(v.nbits == 2 && v.pool == 1 && v.gpool == 2.5);
    ck_assert_str_eq(v.name, "2bit-gpool2.5");
    ck_assert_str_eq(rp_variant_label(&v, lab, sizeof lab),
                     bo.codec_tables == TT_CODEC_ADAPTIVE ? "2-bit (adaptive bits, one-cut pool 2.5)"
                                                          : "2-bit (per-dim tables, one-cut pool 2.5)");
    ck_assert(rp_parse_variant("1bit-shared-gpool3.0", &v));
    ck_assert(v.gpool == 3 && v.codec == TT_CODEC_SHARED);
    ck_assert_str_eq(v.name, "1bit-shared-gpool3");
    /* pool1 is no pooling: the same variant as without it. */
    ck_assert(rp_parse_variant("2bit-pool1", &v));
    ck_assert(v.pool == 1);
    ck_assert_str_eq(v.name, "2bit");
    /* 3 bits: the adaptive codec's average only. */
    ck_assert(rp_parse_variant("3bit-adaptive-pool2", &v));
    ck_assert(v.nbits == 3 && v.codec == TT_CODEC_ADAPTIVE && v.pool == 2);
    ck_assert(rp_parse_variant("3bit", &v) == (bo.codec_tables == TT_CODEC_ADAPTIVE));
    static const char *const bad[] = {"", "3bit-perdim", "3bit-shared", "5bit", "8bit", "2bits", "2bit-", "2bit-foo", "bit",
                                      "Original", "2", "original-shared", "12bit",
                                      "2bit-pool", "2bit-pool0", "2bit-pool02", "2bit-pool65",
                                      "2bit-pool2x", "2bit-pool2-shared", "2bit-adaptivex",
                                      "2bit-shared-adaptive", "exact-pool2", "2bit-pool-2",
                                      "2bit-pool99999999999", "2bit-gpool", "2bit-gpool1",
                                      "2bit-gpool0.5", "2bit-gpool2..5", "2bit-gpool.", "2bit-gpool65",
                                      "2bit-gpool2x", "2bit-gpool-2", "2bit-pool2-gpool2",
                                      "2bit-gpool2-pool2", "2bit-gpool1e3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!rp_parse_variant(bad[i], &v), "accepted '%s'", bad[i]);
}
END_TEST

START_TEST(human_bytes) {
    char b[32];
    ck_assert_str_eq(rp_human_bytes(0, b, sizeof b), "0 B");
    ck_assert_str_eq(rp_human_bytes(1023, b, sizeof b), "1023 B");
    ck_assert_str_eq(rp_human_bytes(1024, b, sizeof b), "1 KiB");
    ck_assert_str_eq(rp_human_bytes(1536, b, sizeof b), "1.5 KiB");
    ck_assert_str_eq(rp_human_bytes(786432, b, sizeof b), "768 KiB");
    /* 1134080 / 2^20 = 1.0815... */
    ck_assert_str_eq(rp_human_bytes(1134080, b, sizeof b), "1.08 MiB");
    /* 12.5 * 2^20 */
    ck_assert_str_eq(rp_human_bytes(13107200, b, sizeof b), "12.5 MiB");
    ck_assert_str_eq(rp_human_bytes(1.25 * 1073741824.0, b, sizeof b), "1.25 GiB");
}
END_TEST

START_TEST(log_ticks) {
    double t[32], lo, hi;
    /* 621879 B = 2^19.246, 1134080 B = 2^20.113: the axis runs from 2^19 (512 KiB) to
     * 2^21 (2 MiB), two octaves, so the 1.5 x 2^e ticks are added. */
    size_t n = rp_log_ticks(621879, 1134080, t, 32, &lo, &hi);
    ck_assert_uint_eq(n, 5);
    ck_assert(lo == 524288 && hi == 2097152);
    const double want[] = {524288, 786432, 1048576, 1572864, 2097152};
    for (size_t i = 0; i < n; i++)
        ck_assert(t[i] == want[i]);
    /* Data on a power of two is moved off the frame: 2^20 exactly -> 2^19 .. 2^21. */
    n = rp_log_ticks(1048576, 1048576, t, 32, &lo, &hi);
    ck_assert(lo == 524288 && hi == 2097152);
    /* 1000 B .. 1e12 B: 2^9 .. 2^41 is 32 octaves -> every 5th power, aligned to
     * multiples of 5: 2^5 .. 2^45, 9 ticks. */
    n = rp_log_ticks(1000, 1e12, t, 32, &lo, &hi);
    ck_assert_uint_eq(n, 9);
    ck_assert(lo == 32 && hi == ldexp(1, 45));
    for (size_t i = 0; i < n; i++)
        ck_assert(t[i] == ldexp(1, 5 + 5 * (int)i));
    /* The tick buffer bound is respected. */
    ck_assert_uint_eq(rp_log_ticks(621879, 1134080, t, 3, &lo, &hi), 3);
}
END_TEST

START_TEST(lin_ticks) {
    double t[32], lo, hi;
    /* span 0.178 / 5 = 0.0356 -> step 0.05: 0.50 .. 0.75 */
    size_t n = rp_lin_ticks(0.532, 0.71, t, 32, &lo, &hi);
    ck_assert_uint_eq(n, 6);
    ck_assert(fabs(lo - 0.5) < 1e-12 && fabs(hi - 0.75) < 1e-12);
    for (size_t i = 0; i < n; i++)
        ck_assert(fabs(t[i] - (0.5 + 0.05 * (double)i)) < 1e-12);
    /* span 0.05 -> step 0.01: 0.95 .. 1.00 */
    n = rp_lin_ticks(0.95, 1.0, t, 32, &lo, &hi);
    ck_assert_uint_eq(n, 6);
    ck_assert(fabs(t[5] - 1.0) < 1e-12);
    /* a single value is widened by 0.05 each way: 0.45 .. 0.55, step 0.02 -> 0.44 .. 0.56 */
    n = rp_lin_ticks(0.5, 0.5, t, 32, &lo, &hi);
    ck_assert_uint_eq(n, 7);
    ck_assert(fabs(lo - 0.44) < 1e-12 && fabs(hi - 0.56) < 1e-12);
    ck_assert(t[0] == 0.44 || fabs(t[0] - 0.44) < 1e-12);
    /* 0 is printed as 0, never -0 */
    n = rp_lin_ticks(0.0, 0.3, t, 32, &lo, &hi);
    ck_assert(t[0] == 0 && !signbit(t[0]));
}
END_TEST

/* original 1 MiB, 2bit 256 KiB (ratio 4), 2bit-shared 512 KiB (ratio 2). 4096 vectors
 * x 128 dims = 2^19 values: 1 MiB = 16 bits/dim, 256 KiB = 4, 512 KiB = 8. */
static void make_report(rp_report *r, rp_variant *v) {
    memset(r, 0, sizeof *r);
    ck_assert(rp_parse_variant("original", &v[0]));
    ck_assert(rp_parse_variant("2bit-perdim", &v[1]));
    ck_assert(rp_parse_variant("2bit-shared", &v[2]));
    const double vals[3][2] = {{0.5, 0.25}, {0.4, 0.25}, {0.45, 0.2}};
    const double ps[3][2] = {{NAN, NAN}, {0.01, 1.0}, {0.2, 0.0499}};
    const uint64_t bytes[3] = {1048576, 262144, 524288};
    for (int i = 0; i < 3; i++) {
        for (int m = 0; m < 2; m++) {
            v[i].value[m] = vals[i][m];
            v[i].p[m] = ps[i][m];
        }
        v[i].bytes = bytes[i];
        v[i].debias_used = TT_DEBIAS_TABLE; /* (the original's is not reported) */
        v[i].bits_per_dim = 8.0 * (double)bytes[i] / (4096.0 * 128);
        v[i].recall = i == 0 ? 1.0 : i == 1 ? 0.95 : NAN;
        v[i].latency_p50 = 0.0015 * (i + 1);
        v[i].latency_queries = 10;
        v[i].build_seconds = 2.5;
        v[i].index_dir = "out/indexes/x";
        v[i].run_path = "runs/x.run";
    }
    r->command = "tartan report --out 'a b'";
    r->created = "2026-01-01T00:00:00Z";
    r->version = "0.1.0";
    r->vectors = "v|1.npy";
    r->doclens = "l.npy";
    r->queries = "q.npy";
    r->qrels = "q\"rels.tsv";
    r->num_docs = 100;
    r->num_vectors = 4096;
    r->dim = 128;
    r->num_queries = 12;
    r->eval_queries = 10;
    r->k = 100;
    r->nprobe = 2;
    r->threshold = 0.45;
    r->ndocs = 1024;
    r->nmetrics = 2;
    snprintf(r->metric[0], 32, "nDCG@10");
    snprintf(r->metric[1], 32, "Recall@100");
    r->nvariants = 3;
    r->variants = v;
}

START_TEST(markdown) {
    rp_report r;
    rp_variant v[3];
    make_report(&r, v);
    char *s = render(rp_write_markdown, &r);
    /* original row: plain values, 1 MiB, ratio 1, 16 bits/dim, 1.50 ms */
    ck_assert_ptr_nonnull(strstr(s, "| original (float16) | 0.5000 | 0.2500 | 1 MiB | 1.00\xc3\x97 "
                                    "| 16.00 | 1.0000 | 1.50 ms | 2.50 s |"));
    /* 2bit: p 0.01 < 0.05 on nDCG (dagger), p 1 on recall (none); 1 MiB / 256 KiB = 4x */
    ck_assert_ptr_nonnull(strstr(s, "| 2-bit (per-dim tables) | "
                                    "0.5000 \xe2\x86\x92 0.4000\xe2\x80\xa0 "
                                    "| 0.2500 \xe2\x86\x92 0.2500 | 1 MiB \xe2\x86\x92 256 KiB | "
                                    "4.00\xc3\x97 | 4.00 | 0.9500 | 3.00 ms | 2.50 s |"));
    /* 2bit-shared: p 0.2 (none), p 0.0499 (dagger); recall not measured */
    ck_assert_ptr_nonnull(strstr(s, "| 2-bit (shared table) | 0.5000 \xe2\x86\x92 0.4500 | "
                                    "0.2500 \xe2\x86\x92 0.2000\xe2\x80\xa0 | "
                                    "1 MiB \xe2\x86\x92 512 KiB "
                                    "| 2.00\xc3\x97 | 8.00 | n/a | 4.50 ms |"));
    /* p-value table, and the '|' of a path escaped */
    ck_assert_ptr_nonnull(strstr(s, "| 2-bit (per-dim tables) | 0.0100\xe2\x80\xa0 | 1.0000 |"));
    ck_assert_ptr_nonnull(strstr(s, "| 2-bit (shared table) | 0.2000 | 0.0499\xe2\x80\xa0 |"));
    ck_assert_ptr_nonnull(strstr(s, "v\\|1.npy"));
    ck_assert_ptr_nonnull(strstr(s, "tartan report --out 'a b'"));
    /* the main table has a header, a rule and one row per variant, same column count */
    size_t rows = 0, cols = 0;
    for (char *line = s; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "| Variant", 9) || !strstr(line, "Bits/dim"))
            continue;
        char *end = strchr(line, '\n');
        for (char *p = line; p < end; p++)
            cols += *p == '|';
        for (char *l2 = end + 1; *l2 == '|'; l2 = strchr(l2, '\n') + 1) {
            size_t c = 0;
            for (char *p = l2; *p != '\n'; p++)
                c += *p == '|';
            ck_assert_uint_eq(c, cols);
            rows++;
        }
        break;
    }
    ck_assert_uint_eq(cols, 10); /* variant + 2 metrics + 6 more columns: 9 cells, 10 bars */
    ck_assert_uint_eq(rows, 1 + 3);
    free(s);
}
END_TEST

START_TEST(csv) {
    rp_report r;
    rp_variant v[3];
    make_report(&r, v);
    char *s = render(rp_write_csv, &r);
    ck_assert_ptr_nonnull(strstr(s, "variant,label,nbits,codec_tables,debias,pool_factor,search,"
                                    "nDCG@10,nDCG@10_original,nDCG@10_p,Recall@100,"));
    ck_assert_ptr_nonnull(strstr(s, "recall@100_vs_exact,"));
    /* missing values are empty fields; the original has no p */
    ck_assert_ptr_nonnull(strstr(s, "\noriginal,original (float16),0,,,1,exact,0.500000,0.500000,,"
                                    "0.250000,0.250000,,1048576,1048576,1.0000,16.0000,1.000000,"
                                    "1.5000,10,2.500,false,"));
    ck_assert_ptr_nonnull(strstr(s, "\n2bit-perdim,2-bit (per-dim tables),2,per-dim,table,1,plaid,0.400000,"
                                    "0.500000,0.01,0.250000,0.250000,1,262144,1048576,4.0000,"
                                    "4.0000,0.950000,3.0000,10,2.500,false,"));
    ck_assert_ptr_nonnull(strstr(s, ",0.0499,524288,1048576,2.0000,8.0000,,4.5000,"));
    /* every row has the header's field count (no field needs quoting here) */
    size_t lines = 0, want = 0;
    for (char *line = s; *line; lines++) {
        char *end = strchr(line, '\n');
        ck_assert_ptr_nonnull(end);
        size_t c = 1;
        for (char *p = line; p < end; p++)
            c += *p == ',';
        if (!want)
            want = c;
        ck_assert_uint_eq(c, want);
        line = end + 1;
    }
    ck_assert_uint_eq(lines, 4);
    ck_assert_uint_eq(want, 7 + 2 * 3 + 11);
    free(s);
}
END_TEST

/* Checks that the text parses with Python's json / xml modules when python3 is there. */
static void python_check(const char *text, const char *script) {
    if (access("/usr/bin/python3", X_OK) != 0)
        return;
    char path[] = "/tmp/tartan-report-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c '%s' %s", script, path);
    int rc = system(cmd);
    unlink(path);
    ck_assert_msg(rc == 0, "python check failed: %s", script);
}

START_TEST(json) {
    rp_report r;
    rp_variant v[3];
    make_report(&r, v);
    char *s = render(rp_write_json, &r);
    ck_assert_ptr_null(strstr(s, "nan"));
    ck_assert_ptr_null(strstr(s, "inf"));
    ck_assert_ptr_nonnull(strstr(s, "\"qrels\": \"q\\\"rels.tsv\""));
    python_check(s,
        "import json, sys\n"
        "j = json.load(open(sys.argv[1]))\n"
        "v = {x[\"name\"]: x for x in j[\"variants\"]}\n"
        "assert list(v) == [\"original\", \"2bit-perdim\", \"2bit-shared\"]\n"
        "o, a, b = v[\"original\"], v[\"2bit-perdim\"], v[\"2bit-shared\"]\n"
        "assert o[\"p_values\"] == {\"nDCG@10\": None, \"Recall@100\": None}\n"
        "assert o[\"ratio\"] == 1 and o[\"bits_per_dim\"] == 16\n"
        "assert a[\"ratio\"] == 4 and a[\"bits_per_dim\"] == 4 and a[\"storage_bytes\"] == 262144\n"
        "assert a[\"metrics\"][\"nDCG@10\"] == 0.4\n"
        "assert a[\"original_metrics\"][\"nDCG@10\"] == 0.5\n"
        "assert a[\"significant\"] == {\"nDCG@10\": True, \"Recall@100\": False}\n"
        "assert b[\"significant\"] == {\"nDCG@10\": False, \"Recall@100\": True}\n"
        "assert b[\"recall_vs_exact\"] is None and a[\"recall_vs_exact\"] == 0.95\n"
        "assert abs(a[\"latency_p50_ms\"] - 3.0) < 1e-9\n"
        "assert j[\"metrics\"] == [\"nDCG@10\", \"Recall@100\"] and j[\"search\"][\"k\"] == 100\n"
        "assert j[\"queries\"][\"evaluated\"] == 10 and j[\"inputs\"][\"ids\"] is None\n");
    free(s);
}
END_TEST

START_TEST(svg) {
    rp_report r;
    rp_variant v[3];
    make_report(&r, v);
    char *s = render(rp_write_svg, &r);
    ck_assert_uint_eq(count(s, "class=\"point\""), 3);
    ck_assert_uint_eq(count(s, "class=\"label\""), 3);
    ck_assert_ptr_nonnull(strstr(s, "data-variant=\"2bit-shared\""));
    ck_assert_ptr_null(strstr(s, "nan"));
    /* 256 KiB .. 1 MiB: axis 2^17 .. 2^21 (four octaves, powers of two only) */
    ck_assert_ptr_nonnull(strstr(s, ">128 KiB</text>"));
    ck_assert_ptr_nonnull(strstr(s, ">2 MiB</text>"));
    ck_assert_ptr_null(strstr(s, ">1.5 MiB</text>"));
    /* nDCG@10 0.4 .. 0.5 padded by 8% (0.008): 0.116 / 5 = 0.0232 -> step 0.05,
     * 0.35 .. 0.55 */
    ck_assert_ptr_nonnull(strstr(s, ">0.35</text>"));
    ck_assert_ptr_nonnull(strstr(s, ">0.55</text>"));
    ck_assert_ptr_null(strstr(s, ">0.30</text>"));
    python_check(s,
        "import sys, xml.etree.ElementTree as E\n"
        "t = E.parse(sys.argv[1])\n"
        "pts = [e for e in t.iter() if e.get(\"class\") == \"point\"]\n"
        "names = [p.get(\"data-variant\") for p in pts]\n"
        "assert names == [\"original\", \"2bit-perdim\", \"2bit-shared\"]\n"
        "labels = [e.text for e in t.iter() if e.get(\"class\") == \"label\"]\n"
        "assert labels == [\"original\", \"2bit-perdim\", \"2bit-shared\"], labels\n");
    /* Points: higher storage further right, higher value further up. */
    double x[3], y[3];
    const char *p = s;
    for (int i = 0; i < 3; i++) {
        p = strstr(p, "class=\"point\"");
        ck_assert_ptr_nonnull(p);
        const char *q = strstr(p, i == 0 ? " d=\"M" : i == 1 ? "cx=\"" : " x=\"");
        ck_assert_ptr_nonnull(q);
        q = strchr(q, i == 0 ? 'M' : '"') + 1;
        x[i] = strtod(q, (char **)&q);
        q = strstr(q, i == 0 ? " " : i == 1 ? "cy=\"" : "y=\"");
        q += i == 0 ? 1 : (i == 1 ? 4 : 3);
        y[i] = strtod(q, NULL);
        p++;
    }
    /* marker coordinates: diamond top (y - 7), circle centre, square corner (-5) */
    y[0] += 7, x[2] += 5, y[2] += 5;
    ck_assert(x[1] < x[2] && x[2] < x[0]);
    ck_assert(y[0] < y[2] && y[2] < y[1]); /* 0.5 above 0.45 above 0.4 (SVG y grows down) */
    /* log scale: 256 KiB -> 512 KiB -> 1 MiB are equal steps */
    ck_assert(fabs((x[2] - x[1]) - (x[0] - x[2])) < 0.2);
    free(s);
}
END_TEST

/* Adaptive and pooled variants: a marker per codec (adaptive: triangles), pooled ones
 * hollow and joined by their own line, and a legend entry for each. */
START_TEST(svg_series) {
    rp_report r;
    rp_variant v[5];
    make_report(&r, v);
    ck_assert(rp_parse_variant("2bit-adaptive", &v[1]));
    ck_assert(rp_parse_variant("2bit-adaptive-pool2", &v[2]));
    ck_assert(rp_parse_variant("1bit-adaptive-pool2", &v[3]));
    ck_assert(rp_parse_variant("2bit-shared-pool2", &v[4]));
    const uint64_t bytes[5] = {1048576, 262144, 131072, 65536, 131072};
    for (int i = 1; i < 5; i++) {
        v[i].bytes = bytes[i];
        v[i].value[0] = 0.5 - 0.02 * i;
    }
    r.nvariants = 5;
    r.variants = v;
    char *s = render(rp_write_svg, &r);
    ck_assert_uint_eq(count(s, "class=\"point\""), 5);
    ck_assert_ptr_nonnull(strstr(s, ">adaptive bits per dimension</text>"));
    ck_assert_ptr_nonnull(strstr(s, ">hollow: token-pooled</text>"));
    ck_assert_ptr_nonnull(strstr(s, ">one shared codec table (ColBERTv2)</text>"));
    ck_assert_ptr_null(strstr(s, ">per-dimension codec tables</text>"));
    /* one line: the two pooled adaptive variants (the others are alone in their series) */
    ck_assert_uint_eq(count(s, "<polyline"), 1);
    python_check(s,
        "import sys, xml.etree.ElementTree as E\n"
        "t = E.parse(sys.argv[1])\n"
        "pts = {e.get(\"data-variant\"): e for e in t.iter() if e.get(\"class\") == \"point\"}\n"
        "names = [\"original\", \"2bit-adaptive\", \"2bit-adaptive-pool2\",\n"
        "         \"1bit-adaptive-pool2\", \"2bit-shared-pool2\"]\n"
        "names = [n.replace(\"-adaptive\", \"\") for n in names] if \"2bit\" in pts else names\n"
        "assert sorted(pts) == sorted(names), sorted(pts)\n"
        "a, p = pts[names[1]], pts[names[2]]\n"
        "assert a.tag.endswith(\"path\") and a.get(\"fill\") == \"#2b8a3e\"\n"
        "assert p.tag.endswith(\"path\") and p.get(\"fill\") == \"#fff\"\n"
        "assert p.get(\"stroke\") == \"#2b8a3e\"\n"
        "q = pts[\"2bit-shared-pool2\"]\n"
        "assert q.tag.endswith(\"rect\") and q.get(\"stroke\") == \"#d9480f\"\n");
    free(s);
}
END_TEST

/* Dense, sparse and hybrid (rp_report.hybrid): an S and an H marker per variant at its
 * storage (the D point's x), S below and H above D for S < D < H values, the axis
 * grown to hold them, the D points (class "point") still one per variant. */
START_TEST(svg_hybrid) {
    rp_report r;
    rp_variant v[3];
    make_report(&r, v);
    r.hybrid = true;
    for (int i = 0; i < 3; i++) {
        v[i].s_value[0] = 0.3;
        v[i].h_value[0] = 0.6 + 0.01 * i;
    }
    char *s = render(rp_write_svg, &r);
    ck_assert_uint_eq(count(s, "class=\"point\""), 3);
    ck_assert_uint_eq(count(s, "class=\"point-s\""), 3);
    ck_assert_uint_eq(count(s, "class=\"point-h\""), 3);
    ck_assert_ptr_nonnull(strstr(s, ">S: sparse</text>"));
    ck_assert_ptr_nonnull(strstr(s, ">H: hybrid (fused)</text>"));
    ck_assert_ptr_nonnull(strstr(s, "dense (D), sparse (S) and hybrid (H)"));
    ck_assert_ptr_null(strstr(s, "nan"));
    python_check(s,
        "import re, sys, xml.etree.ElementTree as E\n"
        "t = E.parse(sys.argv[1])\n"
        "def centre(e):\n"
        "    tag = e.tag.split(\"}\")[1]\n"
        "    if tag == \"circle\": return float(e.get(\"cx\")), float(e.get(\"cy\"))\n"
        "    if tag == \"rect\": return float(e.get(\"x\")) + 5, float(e.get(\"y\")) + 5\n"
        "    x, y = map(float, re.match(r\"M([-0-9.]+) ([-0-9.]+)\", e.get(\"d\")).groups())\n"
        "    c = e.get(\"class\")\n"
        "    return (x + 5, y + 5) if c == \"point-s\" else (x + 6, y) if c == \"point-h\" else (x, y + 7)\n"
        "pts = {}\n"
        "for e in t.iter():\n"
        "    if e.get(\"class\") in (\"point\", \"point-s\", \"point-h\"):\n"
        "        pts[(e.get(\"data-variant\"), e.get(\"class\"))] = centre(e)\n"
        "names = [\"original\", \"2bit-perdim\", \"2bit-shared\"]\n"
        "assert len(pts) == 9, pts\n"
        "for n in names:\n"
        "    (dx, dy), (sx, sy), (hx, hy) = (pts[(n, c)] for c in (\"point\", \"point-s\", \"point-h\"))\n"
        "    assert abs(dx - sx) < 0.11 and abs(dx - hx) < 0.11, (n, dx, sx, hx)\n"
        "    assert hy < dy < sy, (n, hy, dy, sy)\n"
        "ys = [pts[(n, \"point-s\")][1] for n in names]\n"
        "assert max(ys) - min(ys) < 0.11, ys\n"
        "hy = [pts[(n, \"point-h\")][1] for n in names]\n"
        "assert hy[0] > hy[1] > hy[2], hy\n");
    free(s);
    r.hybrid = false; /* without: no S or H marker */
    s = render(rp_write_svg, &r);
    ck_assert_uint_eq(count(s, "class=\"point-s\""), 0);
    ck_assert_ptr_null(strstr(s, "S: sparse"));
    free(s);
}
END_TEST

START_TEST(svg_degenerate) {
    /* Every variant with the same value and one variant alone: finite coordinates. */
    rp_report r;
    rp_variant v[3];
    make_report(&r, v);
    for (int i = 0; i < 3; i++)
        v[i].value[0] = 1.0;
    char *s = render(rp_write_svg, &r);
    ck_assert_ptr_null(strstr(s, "nan"));
    ck_assert_ptr_nonnull(strstr(s, ">1.00</text>"));
    ck_assert_ptr_null(strstr(s, ">1.01</text>")); /* no effectiveness tick above 1 */
    free(s);
    r.nvariants = 1;
    s = render(rp_write_svg, &r);
    ck_assert_ptr_null(strstr(s, "nan"));
    ck_assert_uint_eq(count(s, "class=\"point\""), 1);
    free(s);
    s = render(rp_write_markdown, &r);
    ck_assert_ptr_null(strstr(s, "p-values against"));
    free(s);
}
END_TEST

int main(void) {
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("report");
    tcase_add_test(tc, variant_names);
    tcase_add_test(tc, human_bytes);
    tcase_add_test(tc, log_ticks);
    tcase_add_test(tc, lin_ticks);
    tcase_add_test(tc, markdown);
    tcase_add_test(tc, csv);
    tcase_add_test(tc, json);
    tcase_add_test(tc, svg);
    tcase_add_test(tc, svg_series);
    tcase_add_test(tc, svg_degenerate);
    tcase_add_test(tc, svg_hybrid);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
