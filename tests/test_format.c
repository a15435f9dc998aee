/* On-disk primitives: header encode/decode and its error order, checksummed writer
 * and validated reader, manifest publication, what removal may take. */
#include "testutil.h"

#include "io/dir.h"
#include "io/file.h"
#include "index/index.h"

#include <fcntl.h>

static tt_header sample_header(void) {
    tt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.kind, "TEST", 4);
    h.version = TT_FORMAT_VERSION;
    h.a = 1;
    h.b = 0x1122334455667788ull;
    h.c = 3;
    h.payload_bytes = 10;
    h.payload_hash = 0xdeadbeefcafef00dull;
    return h;
}

START_TEST(header_round_trip) {
    tt_header h = sample_header(), g;
    uint8_t buf[TT_HEADER_SIZE];
    tt_header_encode(&h, buf);
    ck_assert_mem_eq(buf, "TRTNTEST", 8);
    ck_assert_uint_eq(buf[24], 0x88); /* little-endian b */
    ck_assert_int_eq(tt_header_decode(buf, "x", "TEST", &g), TT_OK);
    ck_assert_uint_eq(g.b, h.b);
    ck_assert_uint_eq(g.payload_hash, h.payload_hash);
    ck_assert_int_eq(tt_header_decode(buf, "x", NULL, &g), TT_OK);
}
END_TEST

START_TEST(header_errors_in_order) {
    tt_header h = sample_header(), g;
    uint8_t buf[TT_HEADER_SIZE], bad[TT_HEADER_SIZE];
    tt_header_encode(&h, buf);
    /* bad magic wins over a bad checksum */
    memcpy(bad, buf, sizeof bad);
    bad[0] = 'X';
    bad[20] ^= 1;
    ck_assert_int_eq(tt_header_decode(bad, "f.tt", NULL, &g), TT_EFORMAT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "f.tt"));
    /* any flipped bit elsewhere is a checksum error */
    for (int i = 4; i < TT_HEADER_SIZE; i++) {
        memcpy(bad, buf, sizeof bad);
        bad[i] ^= 0x10;
        ck_assert_int_eq(tt_header_decode(bad, "f.tt", NULL, &g), TT_ECORRUPT);
    }
    /* a newer version with a valid checksum is a version error, not corruption */
    h.version = TT_FORMAT_VERSION + 1;
    tt_header_encode(&h, bad);
    ck_assert_int_eq(tt_header_decode(bad, "f.tt", NULL, &g), TT_EVERSION);
    h.version = TT_FORMAT_VERSION;
    h.flags = 4;
    tt_header_encode(&h, bad);
    ck_assert_int_eq(tt_header_decode(bad, "f.tt", NULL, &g), TT_EVERSION);
    /* wrong kind */
    ck_assert_int_eq(tt_header_decode(buf, "f.tt", "CENT", &g), TT_EFORMAT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "CENT"));
}
END_TEST

START_TEST(writer_reader_round_trip) {
    char *dir = tu_tmpdir();
    tt_fwriter w;
    ck_assert_int_eq(tt_fw_open(&w, dir, "data.tt", "DATA"), TT_OK);
    /* more than the writer's 1 MiB buffer, in odd-sized pieces */
    uint8_t *src = malloc(3 << 20);
    for (size_t i = 0; i < (3u << 20); i++)
        src[i] = (uint8_t)(i * 2654435761u >> 13);
    size_t off = 0, step = 12345;
    while (off < (3u << 20)) {
        size_t n = TT_MIN(step, (3u << 20) - off);
        ck_assert_int_eq(tt_fw_write(&w, src + off, n), TT_OK);
        off += n;
        step = step * 3 % 700001 + 1;
    }
    uint64_t size;
    ck_assert_int_eq(tt_fw_finish(&w, 7, 8, 9, &size), TT_OK);
    tt_fw_abort(&w);
    ck_assert_uint_eq(size, TT_HEADER_SIZE + (3u << 20));

    tt_fmap m;
    ck_assert_int_eq(tt_fmap_open(&m, dir, "data.tt", "DATA", TT_MAP_WHOLE), TT_OK);
    ck_assert_uint_eq(m.h.a, 7);
    ck_assert_uint_eq(m.h.c, 9);
    ck_assert_mem_eq(m.payload, src, 3u << 20);
    ck_assert_int_eq(tt_fmap_check_payload(&m, NULL, NULL), TT_OK);
    ck_assert_uint_eq(m.h.payload_hash, XXH64(src, 3u << 20, 0));
    tt_fmap_close(&m);

    /* read into memory of its own: the same bytes, which later changes to the file do
     * not reach */
    tt_fmap cp;
    ck_assert_int_eq(tt_fmap_open(&cp, dir, "data.tt", "DATA", TT_MAP_COPY), TT_OK);
    ck_assert_uint_eq(cp.size, TT_HEADER_SIZE + (3u << 20));
    ck_assert_uint_eq(cp.h.c, 9);
    ck_assert_mem_eq(cp.payload, src, 3u << 20);
    ck_assert_int_eq(tt_fmap_check_payload(&cp, NULL, NULL), TT_OK);

    /* a flipped payload byte: opens (sizes fine) but the checksum fails */
    char *p = tt_path_join(dir, "data.tt");
    int fd = open(p, O_RDWR);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, 1000000), 1);
    b ^= 0x01;
    ck_assert_int_eq(pwrite(fd, &b, 1, 1000000), 1);
    ck_assert_int_eq(tt_fmap_check_payload(&cp, NULL, NULL), TT_OK);
    ck_assert_mem_eq(cp.payload, src, 3u << 20);
    tt_fmap_close(&cp);
    ck_assert_int_eq(tt_fmap_open(&cp, dir, "data.tt", "DATA", TT_MAP_COPY), TT_OK);
    ck_assert_int_eq(tt_fmap_check_payload(&cp, NULL, NULL), TT_ECORRUPT);
    tt_fmap_close(&cp);
    ck_assert_int_eq(tt_fmap_open(&m, dir, "data.tt", "DATA", TT_MAP_NONE), TT_OK);
    ck_assert_int_eq(tt_fmap_check_payload(&m, NULL, NULL), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "data.tt"));
    tt_fmap_close(&m);
    /* truncation is found at open */
    ck_assert_int_eq(ftruncate(fd, 5000), 0);
    ck_assert_int_eq(tt_fmap_open(&m, dir, "data.tt", "DATA", TT_MAP_NONE), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "truncated"));
    ck_assert_int_eq(ftruncate(fd, 10), 0);
    ck_assert_int_eq(tt_fmap_open(&m, dir, "data.tt", "DATA", TT_MAP_NONE), TT_EFORMAT);
    ck_assert_int_eq(tt_fmap_open(&cp, dir, "data.tt", "DATA", TT_MAP_COPY), TT_EFORMAT);
    close(fd);
    /* a missing file */
    ck_assert_int_eq(tt_fmap_open(&m, dir, "nope.tt", "DATA", TT_MAP_NONE), TT_ENOTFOUND);
    /* the writer refuses to overwrite */
    ck_assert_int_eq(tt_fw_open(&w, dir, "data.tt", "DATA"), TT_EIO);
    free(p);
    free(src);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(manifest_round_trip) {
    char *dir = tu_tmpdir();
    tt_manifest m, r;
    memset(&m, 0, sizeof m);
    for (uint32_t i = 0; i < 3; i++) {
        tt_manifest_entry e;
        memset(&e, 0, sizeof e);
        snprintf(e.name, sizeof e.name, "file%u.tt", i);
        memcpy(e.kind, "ABCD", 4);
        e.size = 1000 + i;
        e.payload_hash = 0x0102030405060708ull * (i + 1);
        ck_assert_int_eq(tt_manifest_add(&m, &e), TT_OK);
    }
    for (uint32_t i = 0; i < 2; i++) {
        tt_manifest_segment sg = {.id = 7 * i, .num_docs = 10 + i, .num_vectors = 100 + i,
                                  .num_deleted = i, .added_vectors = 5 * i, .added_mse = 0.25 * i};
        snprintf(sg.prefix, sizeof sg.prefix, i ? "g000007." : "");
        ck_assert_int_eq(tt_manifest_add_segment(&m, &sg), TT_OK);
    }
    m.generation = 9;
    m.next_auto_id = 1234;
    ck_assert_int_eq(tt_manifest_publish(dir, &m), TT_OK);
    ck_assert_int_eq(tt_manifest_read(dir, &r), TT_OK);
    ck_assert_uint_eq(r.version, 2);
    ck_assert_uint_eq(r.generation, 9);
    ck_assert_uint_eq(r.next_auto_id, 1234);
    ck_assert_uint_eq(r.nseg, 2);
    ck_assert_str_eq(r.seg[1].prefix, "g000007.");
    ck_assert_uint_eq(r.seg[1].num_vectors, 101);
    ck_assert_double_eq(r.seg[1].added_mse, 0.25);
    ck_assert_mem_eq(r.seg, m.seg, 2 * sizeof *m.seg);
    ck_assert_uint_eq(r.n, 3);
    ck_assert_str_eq(r.e[2].name, "file2.tt");
    ck_assert_uint_eq(r.e[1].size, 1001);
    ck_assert_uint_eq(r.e[2].payload_hash, m.e[2].payload_hash);
    ck_assert_ptr_nonnull(tt_manifest_find(&r, "file1.tt"));
    ck_assert_ptr_null(tt_manifest_find(&r, "file9.tt"));
    tt_manifest_free(&m);
    tt_manifest_free(&r);
    /* no temporary left behind */
    char *tmp = tt_path_join(dir, "MANIFEST.tmp");
    ck_assert_int_ne(access(tmp, F_OK), 0);
    free(tmp);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* tt_index_owns / tt_remove_ours: the name is necessary, not sufficient: a file is the
 * index's if its manifest lists it or it starts with tartan's magic. */
static void put(const char *dir, const char *name, const char *text) {
    char *p = tt_path_join(dir, name);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    free(p);
}
static bool present(const char *dir, const char *name) {
    char *p = tt_path_join(dir, name);
    bool there = access(p, F_OK) == 0;
    free(p);
    return there;
}

START_TEST(removal_judges_by_content_not_name) {
    char *dir = tu_tmpdir();
    tt_manifest m;
    memset(&m, 0, sizeof m);
    tt_manifest_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "codes.tt");
    memcpy(e.kind, "CODE", 4);
    ck_assert_int_eq(tt_manifest_add(&m, &e), TT_OK);
    ck_assert_int_eq(tt_manifest_publish(dir, &m), TT_OK);
    tt_manifest_free(&m);
    put(dir, "codes.tt", "overwritten header, but listed");    /* the index's */
    put(dir, "g000003.ivf.tt", TT_MAGIC "a killed add's");      /* the index's */
    put(dir, "g000009.sketch.tt", "my notes");                 /* the user's */
    put(dir, "notes.txt", "my notes");                         /* the user's */
    put(dir, "g000004.codes.tt", "");                          /* empty: nothing to lose */
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(fd, 0);
    tt_manifest listed;
    ck_assert_int_eq(tt_manifest_read(dir, &listed), TT_OK);
    ck_assert(tt_index_owns(fd, "codes.tt", &listed));
    ck_assert(!tt_index_owns(fd, "codes.tt", NULL)); /* unlisted and no magic */
    ck_assert(tt_index_owns(fd, "g000003.ivf.tt", NULL));
    ck_assert(tt_index_owns(fd, "g000004.codes.tt", NULL));
    ck_assert(tt_index_owns(fd, "MANIFEST", NULL));
    ck_assert(!tt_index_owns(fd, "g000009.sketch.tt", &listed));
    ck_assert(!tt_index_owns(fd, "notes.txt", &listed));
    ck_assert(!tt_index_owns(fd, "missing.tt", &listed));
    tt_manifest_free(&listed);
    char foreign[256];
    ck_assert_uint_eq(tt_foreign_entries(fd, dir, foreign, sizeof foreign), 2);
    ck_assert_ptr_nonnull(strstr(foreign, "g000009.sketch.tt"));
    ck_assert_ptr_nonnull(strstr(foreign, "notes.txt"));
    close(fd);
    /* Removal takes the index's files and leaves the user's (and so the directory). */
    char *parent = strdup(dir), *slash = strrchr(parent, '/');
    ck_assert_ptr_nonnull(slash);
    *slash = '\0';
    int pfd = open(parent, O_RDONLY | O_DIRECTORY);
    ck_assert_int_eq(tt_remove_ours(pfd, slash + 1, dir), TT_EEXIST);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "g000009.sketch.tt"));
    ck_assert(!present(dir, "codes.tt") && !present(dir, "g000003.ivf.tt") &&
              !present(dir, "MANIFEST") && !present(dir, "g000004.codes.tt"));
    ck_assert(present(dir, "g000009.sketch.tt") && present(dir, "notes.txt"));
    close(pfd);
    free(parent);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(varint_round_trip) {
    uint64_t vals[] = {0, 1, 127, 128, 300, 16383, 16384, 1ull << 35, UINT64_MAX};
    uint8_t buf[16];
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        size_t n = tt_varint_put(buf, vals[i]);
        const uint8_t *p = buf;
        uint64_t v;
        ck_assert(tt_varint_get(&p, buf + n, &v));
        ck_assert_uint_eq(v, vals[i]);
        ck_assert_ptr_eq(p, buf + n);
        p = buf; /* truncated input is refused, never over-read */
        if (n > 1)
            ck_assert(!tt_varint_get(&p, buf + n - 1, &v));
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("format");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, header_round_trip);
    tcase_add_test(tc, header_errors_in_order);
    tcase_add_test(tc, writer_reader_round_trip);
    tcase_add_test(tc, manifest_round_trip);
    tcase_add_test(tc, varint_round_trip);
    tcase_add_test(tc, removal_judges_by_content_not_name);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
