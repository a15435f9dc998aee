/* Fuzz target: tartan serve's request parser (tools/serve/request.c): search, add,
 * delete and compact bodies, the URL router and base64. Byte 0 picks the parser, byte
 * 1 the index dimension (1..8, so that hand-written seeds stay short); the rest is the
 * body. Every accepted request must hold only finite vectors of that dimension, within
 * the limits (small ones, so that they are reached), with offsets and lengths that
 * tile the vectors; every refusal must be a 4xx/5xx status with a message. The fast
 * path for the required form must agree with the jansson path, value for value.
 * Seeds: tests/fuzz/corpus/serve. */
#include "../../tools/serve/serve.h"
#include "fuzz.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

static void check_rows(const float *v, uint64_t nvec, uint32_t dim, uint32_t n,
                       const uint64_t *offs, const uint32_t *lens, uint32_t max_len) {
    uint64_t next = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (offs[i] != next || lens[i] == 0 || lens[i] > max_len)
            abort();
        next += lens[i];
    }
    if (next != nvec)
        abort();
    for (uint64_t i = 0; i < nvec * dim; i++)
        if (!isfinite(v[i]))
            abort();
}

static void check_err(int st, const char *err) {
    if (st < 400 || st > 599 || !err[0])
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2)
        return 0;
    int which = data[0] % 6;
    uint32_t dim = 1 + data[1] % 8;
    const char *body = (const char *)data + 2;
    size_t n = size - 2;
    srv_limits lim;
    srv_limits_init(&lim);
    lim.max_k = 100;
    lim.max_queries = 16;
    lim.max_query_vectors = 32;
    lim.max_docs = 16;
    lim.max_doc_vectors = 32;
    lim.max_ids = 64;
    char err[512];
    err[0] = '\0';
    int st;
    switch (which) {
    case 0:
    case 1: {
        srv_search_req r, ref;
        char err2[512];
        st = srv_parse_search(body, n, dim, which == 1, &lim, &r, err, sizeof err);
        /* The fast path for the required form must read what jansson reads. */
        int st2 = srv_parse_search_json(body, n, dim, which == 1, &lim, &ref, err2, sizeof err2);
        if (st != st2)
            abort();
        if (st == 0) {
            if (ref.nqueries != r.nqueries || ref.k != r.k || ref.nvectors != r.nvectors ||
                memcmp(&ref.opt, &r.opt, sizeof r.opt) || !!ref.texts != !!r.texts ||
                (r.nvectors && memcmp(ref.vectors, r.vectors, r.nvectors * dim * sizeof(float))) ||
                (!r.texts && (memcmp(ref.offs, r.offs, r.nqueries * sizeof *r.offs) ||
                              memcmp(ref.lens, r.lens, r.nqueries * sizeof *r.lens))))
                abort();
            srv_search_req_free(&ref);
        }
        if (st) {
            check_err(st, err);
            break;
        }
        if (r.nqueries == 0 || r.nqueries > lim.max_queries || r.k == 0 || r.k > lim.max_k)
            abort();
        if ((r.where && !r.where[0]) || (!r.filter_ids && r.nfilter_ids) ||
            r.nfilter_ids > lim.max_ids || r.opt.filter)
            abort();
        for (uint32_t i = 0; i < r.nfilter_ids; i++)
            if (!r.filter_ids[i] || srv_id_problem(r.filter_ids[i], strlen(r.filter_ids[i])))
                abort();
        if (r.texts) {
            if (which != 1)
                abort();
            for (uint32_t i = 0; i < r.nqueries; i++)
                if (!r.texts[i] || !r.texts[i][0])
                    abort();
        } else {
            check_rows(r.vectors, r.nvectors, dim, r.nqueries, r.offs, r.lens,
                       lim.max_query_vectors);
        }
        srv_search_req_free(&r);
        break;
    }
    case 2: {
        srv_add_req r;
        st = srv_parse_add(body, n, dim, &lim, &r, err, sizeof err);
        if (st) {
            check_err(st, err);
            break;
        }
        if (r.ndocs == 0 || r.ndocs > lim.max_docs)
            abort();
        check_rows(r.vectors, r.nvectors, dim, r.ndocs, r.offs, r.lens, lim.max_doc_vectors);
        for (uint32_t i = 0; r.ids && i < r.ndocs; i++)
            if (srv_id_problem(r.ids[i], strlen(r.ids[i])))
                abort();
        srv_add_req_free(&r);
        break;
    }
    case 3: {
        srv_delete_req r;
        st = srv_parse_delete(body, n, &lim, &r, err, sizeof err);
        if (st) {
            check_err(st, err);
            break;
        }
        if (r.nids == 0 || r.nids > lim.max_ids)
            abort();
        for (uint32_t i = 0; i < r.nids; i++)
            if (srv_id_problem(r.ids[i], strlen(r.ids[i])))
                abort();
        srv_delete_req_free(&r);
        break;
    }
    case 4: {
        bool retrain;
        st = srv_parse_compact(body, n, &retrain, err, sizeof err);
        if (st)
            check_err(st, err);
        /* the body as a URL path */
        char *path = malloc(n + 1);
        if (!path)
            break;
        memcpy(path, body, n);
        path[n] = '\0';
        char name[129];
        int ep = srv_route(path, name, sizeof name);
        if (ep < SRV_EP_NONE || ep >= SRV_EP_COUNT || strlen(name) >= sizeof name)
            abort();
        if ((ep == SRV_EP_SEARCH || ep == SRV_EP_ADD || ep == SRV_EP_DELETE) && !name[0])
            abort();
        free(path);
        break;
    }
    default: {
        uint8_t *out = malloc(3 * (n / 4) + 3);
        size_t got = 0;
        if (out && srv_base64_decode(body, n, out, &got) == 0 && got > 3 * (n / 4) + 3)
            abort();
        free(out);
        break;
    }
    }
    return 0;
}
