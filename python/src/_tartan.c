/* _tartan: the CPython extension under `import tartan`, over include/tartan.h only.
 *
 * It is deliberately thin: python/tartan/__init__.py turns NumPy arrays into
 * C-contiguous float32/float16 buffers (without a copy when they already are) and
 * option names into the dictionaries read here; this file borrows those buffers,
 * calls the library with the GIL released, and turns tt_status codes into the
 * tartan.Error classes __init__.py registers (set_error_classes).
 *
 * Threads: the GIL protects every field of the objects here. Searches borrow a
 * search context from the index's pool while holding the GIL, release it for
 * tt_search, and give it back after taking it again. An Index keeps a reference-counted
 * snapshot (the open tt_index and its contexts); close() and a reopen after a change
 * drop the Index's reference, and the last running search frees the snapshot.
 *
 * Interruption: builds, adds and compactions run on a worker thread while the calling
 * thread waits with the GIL released, waking every 50 ms to run Python's signal
 * handlers; a KeyboardInterrupt sets the library's cancel flag, the operation stops
 * with TT_ECANCELED (removing what it wrote), and the KeyboardInterrupt propagates.
 * Batch searches run in slices and check for signals between them. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
/* NumPy's C API only for the result arrays of the single-query fast path. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <tartan.h>

/* ------------------------------------------------------------------ errors */

static PyObject *error_classes; /* dict: int status -> class; set by set_error_classes */
static PyObject *error_base;    /* tartan.Error */

/* Raises the class registered for status with msg (the library's message, or
 * tt_strerror when it is empty). Returns NULL. */
static PyObject *raise_status(int status, const char *msg) {
    PyObject *cls = NULL, *key = PyLong_FromLong(status);
    if (key && error_classes)
        cls = PyDict_GetItemWithError(error_classes, key); /* borrowed */
    Py_XDECREF(key);
    if (PyErr_Occurred())
        return NULL;
    if (!cls)
        cls = error_base ? error_base : PyExc_RuntimeError;
    if (!msg || !*msg)
        msg = tt_strerror(status);
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (!text)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(cls, text);
    if (exc) {
        PyObject *code = PyLong_FromLong(status);
        if (!code || PyObject_SetAttrString(exc, "status", code) < 0 ||
            PyObject_SetAttrString(exc, "message", text) < 0) {
            Py_XDECREF(code);
            Py_DECREF(exc);
            Py_DECREF(text);
            return NULL;
        }
        Py_DECREF(code);
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    Py_DECREF(text);
    return NULL;
}

static PyObject *raise_last(int status) { return raise_status(status, tt_last_error()); }

static PyObject *set_error_classes(PyObject *self, PyObject *args) {
    PyObject *d, *base;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &d, &base))
        return NULL;
    Py_INCREF(d);
    Py_INCREF(base);
    Py_XSETREF(error_classes, d);
    Py_XSETREF(error_base, base);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ options */

/* Options arrive as a dict {name: value} already checked for names by __init__.py;
 * here each is read into its struct field, with the type checked. */
enum { OPT_INT, OPT_U32, OPT_U64, OPT_DOUBLE, OPT_FLOAT, OPT_BOOL, OPT_STR, OPT_CHOICE,
       OPT_BOOL_CHOICE /* OPT_CHOICE that also takes False and True, as values[0], [1] */ };

typedef struct {
    const char *name;
    int type;
    size_t offset;
    const char *const *choices; /* OPT_CHOICE: NULL-terminated names, value = position */
    const int *values;          /* OPT_CHOICE: the int stored for each name */
} optspec;

static int set_opt(void *base, const optspec *sp, PyObject *v) {
    char *p = (char *)base + sp->offset;
    switch (sp->type) {
    case OPT_BOOL: {
        int b = PyObject_IsTrue(v);
        if (b < 0)
            return -1;
        *(int *)p = b;
        return 0;
    }
    case OPT_STR: {
        if (v == Py_None) {
            *(const char **)p = NULL;
            return 0;
        }
        if (!PyUnicode_Check(v)) {
            PyErr_Format(PyExc_TypeError, "option %s: expected a str, got %.100s", sp->name,
                         Py_TYPE(v)->tp_name);
            return -1;
        }
        const char *s = PyUnicode_AsUTF8(v); /* lives as long as v (held by the dict) */
        if (!s)
            return -1;
        *(const char **)p = s;
        return 0;
    }
    case OPT_BOOL_CHOICE:
        if (PyBool_Check(v)) {
            *(int *)p = sp->values[v == Py_True];
            return 0;
        }
        /* fall through */
    case OPT_CHOICE: {
        const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        if (s)
            for (int i = 0; sp->choices[i]; i++)
                if (!strcmp(s, sp->choices[i])) {
                    *(int *)p = sp->values[i];
                    return 0;
                }
        PyErr_Clear();
        PyObject *r = PyObject_Repr(v);
        if (!r)
            return -1;
        PyErr_Format(PyExc_ValueError, "option %s: %U is not one of", sp->name, r);
        Py_DECREF(r);
        /* append the choices */
        PyObject *t, *e, *tb;
        PyErr_Fetch(&t, &e, &tb);
        PyObject *msg = PyUnicode_FromObject(e);
        for (int i = 0; msg && sp->choices[i]; i++) {
            PyObject *m2 = PyUnicode_FromFormat("%U%s '%s'", msg, i ? "," : "", sp->choices[i]);
            Py_DECREF(msg);
            msg = m2;
        }
        Py_XDECREF(t);
        Py_XDECREF(e);
        Py_XDECREF(tb);
        if (msg) {
            PyErr_SetObject(PyExc_ValueError, msg);
            Py_DECREF(msg);
        }
        return -1;
    }
    case OPT_DOUBLE:
    case OPT_FLOAT: {
        if (!PyFloat_Check(v) && !PyLong_Check(v) && !PyIndex_Check(v)) {
            PyErr_Format(PyExc_TypeError, "option %s: expected a number, got %.100s", sp->name,
                         Py_TYPE(v)->tp_name);
            return -1;
        }
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        if (sp->type == OPT_DOUBLE)
            *(double *)p = d;
        else
            *(float *)p = (float)d;
        return 0;
    }
    default: {
        if (PyFloat_Check(v) || PyBool_Check(v) || !PyIndex_Check(v)) {
            PyErr_Format(PyExc_TypeError, "option %s: expected an int, got %.100s", sp->name,
                         Py_TYPE(v)->tp_name);
            return -1;
        }
        PyObject *iv = PyNumber_Index(v);
        if (!iv)
            return -1;
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(iv, &overflow);
        Py_DECREF(iv);
        if (x == -1 && PyErr_Occurred())
            return -1;
        long long lo = sp->type == OPT_INT ? INT32_MIN : 0;
        long long hi = sp->type == OPT_INT ? INT32_MAX : sp->type == OPT_U32 ? UINT32_MAX : INT64_MAX;
        if (overflow || x < lo || x > hi) {
            PyErr_Format(PyExc_ValueError, "option %s: %S is out of range [%lld, %lld]", sp->name,
                         v, lo, hi);
            return -1;
        }
        if (sp->type == OPT_INT)
            *(int *)p = (int)x;
        else if (sp->type == OPT_U32)
            *(uint32_t *)p = (uint32_t)x;
        else
            *(uint64_t *)p = (uint64_t)x;
        return 0;
    }
    }
}

/* Applies dict d (may be None/NULL) to the struct at base. Unknown names: TypeError. */
static int apply_opts(void *base, const optspec *spec, PyObject *d, const char *what) {
    if (!d || d == Py_None)
        return 0;
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "options must be a dict");
        return -1;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *name = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        if (!name) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "option names must be str");
            return -1;
        }
        const optspec *sp = spec;
        while (sp->name && strcmp(sp->name, name))
            sp++;
        if (!sp->name) {
            PyErr_Format(PyExc_TypeError, "%s: unknown option '%s'", what, name);
            return -1;
        }
        if (set_opt(base, sp, v) < 0)
            return -1;
    }
    return 0;
}

#define OFF(s, f) offsetof(s, f)
static const char *const codec_names[] = {"adaptive", "per-dim", "shared", NULL};
static const int codec_values[] = {TT_CODEC_ADAPTIVE, TT_CODEC_PER_DIM, TT_CODEC_SHARED};
static const char *const keep_names[] = {"none", "f16", NULL};
static const int keep_values[] = {TT_KEEP_NONE, TT_KEEP_F16};
static const char *const debias_names[] = {"none", "table", "vector", "auto", NULL};
static const int debias_values[] = {TT_DEBIAS_NONE, TT_DEBIAS_TABLE, TT_DEBIAS_VECTOR,
                                    TT_DEBIAS_AUTO};
static const char *const assign_names[] = {"two-level", "exact", NULL};
static const int assign_values[] = {TT_ASSIGN_TWO_LEVEL, TT_ASSIGN_EXACT};

static const optspec build_spec[] = {
    {"nbits", OPT_INT, OFF(tt_build_options, nbits), NULL, NULL},
    {"centroids", OPT_U32, OFF(tt_build_options, num_centroids), NULL, NULL},
    {"threads", OPT_INT, OFF(tt_build_options, threads), NULL, NULL},
    {"memory", OPT_U64, OFF(tt_build_options, memory_bytes), NULL, NULL},
    {"seed", OPT_U64, OFF(tt_build_options, seed), NULL, NULL},
    {"normalize", OPT_BOOL, OFF(tt_build_options, normalize), NULL, NULL},
    {"keep_originals", OPT_CHOICE, OFF(tt_build_options, keep_originals), keep_names, keep_values},
    {"codec", OPT_CHOICE, OFF(tt_build_options, codec_tables), codec_names, codec_values},
    {"assign", OPT_CHOICE, OFF(tt_build_options, assign), assign_names, assign_values},
    {"sample_factor", OPT_DOUBLE, OFF(tt_build_options, sample_factor), NULL, NULL},
    {"min_train_per_centroid", OPT_U32, OFF(tt_build_options, min_train_per_centroid), NULL, NULL},
    {"max_train_per_centroid", OPT_U32, OFF(tt_build_options, max_train_per_centroid), NULL, NULL},
    {"kmeans_iters", OPT_INT, OFF(tt_build_options, kmeans_iters), NULL, NULL},
    {"force", OPT_BOOL, OFF(tt_build_options, force), NULL, NULL},
    {"encoder", OPT_STR, OFF(tt_build_options, encoder), NULL, NULL},
    {"codebook", OPT_STR, OFF(tt_build_options, codebook), NULL, NULL},
    {"lloyd_max_rounds", OPT_INT, OFF(tt_build_options, lloyd_max_rounds), NULL, NULL},
    {"pool_factor", OPT_INT, OFF(tt_build_options, pool_factor), NULL, NULL},
    {"pool_global", OPT_DOUBLE, OFF(tt_build_options, pool_global), NULL, NULL},
    {"debias", OPT_BOOL_CHOICE, OFF(tt_build_options, debias), debias_names, debias_values},
    {"metadata", OPT_STR, OFF(tt_build_options, metadata), NULL, NULL},
    {NULL, 0, 0, NULL, NULL}};

static const optspec change_spec[] = {
    {"upsert", OPT_BOOL, OFF(tt_change_options, upsert), NULL, NULL},
    {"strict", OPT_BOOL, OFF(tt_change_options, strict), NULL, NULL},
    {"retrain", OPT_BOOL, OFF(tt_change_options, retrain), NULL, NULL},
    {"threads", OPT_INT, OFF(tt_change_options, threads), NULL, NULL},
    {"memory", OPT_U64, OFF(tt_change_options, memory_bytes), NULL, NULL},
    {"pool_factor", OPT_INT, OFF(tt_change_options, pool_factor), NULL, NULL},
    {"metadata", OPT_STR, OFF(tt_change_options, metadata), NULL, NULL},
    {NULL, 0, 0, NULL, NULL}};

static const char *const mode_names[] = {"plaid", "exhaustive", "exact", NULL};
static const int mode_values[] = {TT_MODE_PLAID, TT_MODE_EXHAUSTIVE, TT_MODE_EXACT};
static const char *const score_names[] = {"sum", "mean", NULL};
static const int score_values[] = {TT_SCORE_SUM, TT_SCORE_MEAN};
static const char *const prune_names[] = {"auto", "absolute", "relative", NULL};
static const int prune_values[] = {TT_PRUNE_AUTO, TT_PRUNE_ABSOLUTE, TT_PRUNE_RELATIVE};
static const char *const rerank_names[] = {"adaptive", "fixed", NULL};
static const int rerank_values[] = {TT_RERANK_ADAPTIVE, TT_RERANK_FIXED};

static const optspec search_spec[] = {
    {"mode", OPT_CHOICE, OFF(tt_search_options, mode), mode_names, mode_values},
    {"nprobe", OPT_INT, OFF(tt_search_options, nprobe), NULL, NULL},
    {"threshold", OPT_FLOAT, OFF(tt_search_options, threshold), NULL, NULL},
    {"ndocs", OPT_U32, OFF(tt_search_options, ndocs), NULL, NULL},
    {"score", OPT_CHOICE, OFF(tt_search_options, score), score_names, score_values},
    {"pruning", OPT_CHOICE, OFF(tt_search_options, pruning), prune_names, prune_values},
    {"prune_ratio", OPT_FLOAT, OFF(tt_search_options, prune_ratio), NULL, NULL},
    {"rerank", OPT_CHOICE, OFF(tt_search_options, rerank), rerank_names, rerank_values},
    {"tuned", OPT_BOOL, OFF(tt_search_options, tuned), NULL, NULL},
    {"rerank_margin", OPT_FLOAT, OFF(tt_search_options, rerank_margin), NULL, NULL},
    {"sketch", OPT_INT, OFF(tt_search_options, sketch), NULL, NULL},
    {"centroid_groups", OPT_INT, OFF(tt_search_options, centroid_groups), NULL, NULL},
    {"filter_direct_max", OPT_U64, OFF(tt_search_options, filter_direct_max), NULL, NULL},
    {NULL, 0, 0, NULL, NULL}};

static const char *const io_names[] = {"auto", "uring", "mmap", NULL};
static const int io_values[] = {TT_IO_AUTO, TT_IO_URING, TT_IO_MMAP};
static const optspec open_spec[] = {
    {"io", OPT_CHOICE, OFF(tt_open_options, io), io_names, io_values},
    {"direct", OPT_BOOL, OFF(tt_open_options, direct), NULL, NULL},
    {"queue_depth", OPT_INT, OFF(tt_open_options, queue_depth), NULL, NULL},
    {NULL, 0, 0, NULL, NULL}};

/* The option names of each kind, for __init__.py's checks and the stubs. */
static PyObject *spec_names(const optspec *sp) {
    PyObject *t = PyList_New(0);
    for (; t && sp->name; sp++) {
        PyObject *s = PyUnicode_FromString(sp->name);
        if (!s || PyList_Append(t, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(t);
            return NULL;
        }
        Py_DECREF(s);
    }
    return t;
}

/* ------------------------------------------------------- buffers */

/* Borrows a C-contiguous buffer of obj; format checked against fmt (one struct code
 * such as "f", "e", "q", "Q", "I") and the item size. */
static int get_buf(PyObject *obj, Py_buffer *b, const char *fmt, Py_ssize_t itemsize, int writable,
                   const char *what) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT |
                                   (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    int ok = b->itemsize == itemsize &&
             (!strcmp(f, fmt) || (itemsize == 8 && strchr("qQlL", *fmt) && strchr("qQlL", *f) &&
                                  (isupper((unsigned char)*f) != 0) == (isupper((unsigned char)*fmt) != 0)));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: buffer of format '%s' (itemsize %zd), expected '%s'",
                     what, b->format ? b->format : "B", b->itemsize, fmt);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------- cancellable worker */

typedef struct job {
    int (*fn)(struct job *);
    volatile int cancel;
    int status;
    char message[2048];
    int done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* arguments */
    const char *path;
    tt_input *in;
    tt_build_options bo;
    tt_build_stats bstats;
    tt_change_options co;
    tt_change_stats cstats;
    const char *const *ids;
    size_t nids;
    tt_tune_options to;
    tt_tune_info tinfo;
    /* progress: the worker's latest report, delivered to the Python callable `progress`
     * by the waiting thread (never called from the worker: it holds no GIL) */
    PyObject *progress;
    const char *phase;
    uint64_t done_units, total_units;
    int progress_new;
} job;

static void job_progress(void *user, const char *phase, uint64_t done, uint64_t total) {
    job *j = user;
    pthread_mutex_lock(&j->mu);
    j->phase = phase;
    j->done_units = done;
    j->total_units = total;
    j->progress_new = 1;
    pthread_mutex_unlock(&j->mu);
}

/* Calls j->progress(phase, done, total) if the worker reported since the last call.
 * GIL held. Returns -1 with the callable's exception. */
static int deliver_progress(job *j) {
    if (!j->progress)
        return 0;
    pthread_mutex_lock(&j->mu);
    int fresh = j->progress_new;
    const char *phase = j->phase;
    unsigned long long d = j->done_units, t = j->total_units;
    j->progress_new = 0;
    pthread_mutex_unlock(&j->mu);
    if (!fresh || !phase)
        return 0;
    PyObject *r = PyObject_CallFunction(j->progress, "sKK", phase, d, t);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

static void *job_main(void *arg) {
    job *j = arg;
    int st = j->fn(j);
    pthread_mutex_lock(&j->mu);
    j->status = st;
    if (st != TT_OK)
        snprintf(j->message, sizeof j->message, "%s", tt_last_error());
    j->done = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Runs j->fn on a worker thread, the GIL released; returns 0 with j->status set, or -1
 * with a Python exception (a signal handler raised: the job was cancelled and has
 * finished). */
static int run_job(job *j) {
    pthread_t th;
    int interrupted = 0;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->done = 0;
    j->cancel = 0;
    if (pthread_create(&th, NULL, job_main, j) != 0) {
        pthread_mutex_destroy(&j->mu);
        pthread_cond_destroy(&j->cv);
        PyErr_SetString(PyExc_RuntimeError, "tartan: cannot start a worker thread");
        return -1;
    }
    for (;;) {
        int done;
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&j->mu);
        if (!j->done) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        }
        done = j->done;
        pthread_mutex_unlock(&j->mu);
        Py_END_ALLOW_THREADS
        if (!interrupted && deliver_progress(j) < 0) {
            interrupted = 1; /* the progress callable raised: stop, and raise that */
            j->cancel = 1;
        }
        if (done)
            break;
        if (!interrupted && PyErr_CheckSignals() < 0) {
            interrupted = 1;
            j->cancel = 1; /* the library stops at its next check */
        }
    }
    pthread_join(th, NULL);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    return interrupted ? -1 : 0;
}

static int job_build(job *j) { return tt_build(j->path, j->in, &j->bo, &j->bstats); }
static int job_add(job *j) { return tt_index_add(j->path, j->in, &j->co, &j->cstats); }
static int job_delete(job *j) { return tt_index_delete(j->path, j->ids, j->nids, &j->co, &j->cstats); }
static int job_compact(job *j) { return tt_index_compact(j->path, &j->co, &j->cstats); }
static int job_tune(job *j) { return tt_index_tune(j->path, &j->to, &j->tinfo); }

/* ------------------------------------------------------- inputs */

/* Ids (a sequence of str, or None) as NUL-terminated UTF-8 pointers into the str
 * objects, which *keep holds. */
static int get_ids(PyObject *ids, PyObject **keep, const char ***out, size_t *n, const char *what) {
    *keep = NULL;
    *out = NULL;
    *n = 0;
    if (ids == Py_None)
        return 0;
    /* a private list: the str objects stay alive (and in place) while the GIL is
     * released, whatever other threads do to the caller's sequence */
    PyObject *seq = PySequence_Check(ids) && !PyUnicode_Check(ids) ? PySequence_List(ids) : NULL;
    if (!seq) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "ids must be a sequence of str");
        return -1;
    }
    Py_ssize_t m = PyList_GET_SIZE(seq);
    const char **p = PyMem_Calloc((size_t)(m ? m : 1), sizeof *p);
    if (!p) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *s = PyList_GET_ITEM(seq, i);
        if (!PyUnicode_Check(s)) {
            PyErr_Format(PyExc_TypeError, "%s: id %zd is a %.100s, not a str", what, i,
                         Py_TYPE(s)->tp_name);
            goto fail;
        }
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(s, &len);
        if (!u)
            goto fail;
        if ((size_t)len != strlen(u)) {
            PyErr_Format(PyExc_ValueError, "%s: id %zd contains a NUL character", what, i);
            goto fail;
        }
        p[i] = u;
    }
    *keep = seq;
    *out = p;
    *n = (size_t)m;
    return 0;
fail:
    PyMem_Free(p);
    Py_DECREF(seq);
    return -1;
}

/* An input from memory: blocks is a list of C-contiguous buffers of float32 ('f') or
 * float16 ('e') values, dim per row; doclens None (one document per block) or an int64
 * buffer. The buffers are held in bufs (released by release_bufs). */
typedef struct {
    Py_buffer *bufs;
    Py_ssize_t nbufs;
    Py_buffer lens;
    int have_lens;
    PyObject *ids_keep;
    const char **ids;
} mem_input;

static void mem_input_release(mem_input *m) {
    for (Py_ssize_t i = 0; i < m->nbufs; i++)
        PyBuffer_Release(&m->bufs[i]);
    PyMem_Free(m->bufs);
    if (m->have_lens)
        PyBuffer_Release(&m->lens);
    Py_XDECREF(m->ids_keep);
    PyMem_Free((void *)m->ids);
    memset(m, 0, sizeof *m);
}

static int mem_input_open(mem_input *m, tt_input **in, PyObject *blocks, unsigned dim, int f16,
                          PyObject *doclens, PyObject *ids, const char *name) {
    memset(m, 0, sizeof *m);
    *in = NULL;
    if (!PyList_Check(blocks)) {
        PyErr_SetString(PyExc_TypeError, "blocks must be a list");
        return -1;
    }
    Py_ssize_t nb = PyList_GET_SIZE(blocks);
    const void **ptrs = NULL;
    uint64_t *rows = NULL;
    size_t nids = 0;
    int rc = -1;
    m->bufs = PyMem_Calloc((size_t)(nb ? nb : 1), sizeof *m->bufs);
    ptrs = PyMem_Calloc((size_t)(nb ? nb : 1), sizeof *ptrs);
    rows = PyMem_Calloc((size_t)(nb ? nb : 1), sizeof *rows);
    if (!m->bufs || !ptrs || !rows) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        if (get_buf(PyList_GET_ITEM(blocks, i), &m->bufs[i], f16 ? "e" : "f", f16 ? 2 : 4, 0,
                    "vectors") < 0)
            goto done;
        m->nbufs = i + 1;
        Py_ssize_t items = m->bufs[i].len / m->bufs[i].itemsize;
        if (dim == 0 || items % dim) {
            PyErr_Format(PyExc_ValueError, "vectors: block %zd has %zd values, not rows of %u",
                         i, items, dim);
            goto done;
        }
        ptrs[i] = m->bufs[i].buf;
        rows[i] = (uint64_t)(items / dim);
    }
    uint64_t ndocs = 0;
    if (doclens != Py_None) {
        if (get_buf(doclens, &m->lens, "q", 8, 0, "doclens") < 0)
            goto done;
        m->have_lens = 1;
        ndocs = (uint64_t)(m->lens.len / 8);
    }
    if (get_ids(ids, &m->ids_keep, &m->ids, &nids, "ids") < 0)
        goto done;
    if (m->ids && nids != (m->have_lens ? ndocs : (uint64_t)nb)) {
        PyErr_Format(PyExc_ValueError, "ids: %zu ids for %llu documents", nids,
                     (unsigned long long)(m->have_lens ? ndocs : (uint64_t)nb));
        goto done;
    }
    int st;
    Py_BEGIN_ALLOW_THREADS
    st = tt_input_from_memory(in, dim, f16 ? TT_DTYPE_F16 : TT_DTYPE_F32, (size_t)nb, ptrs, rows,
                              m->have_lens ? (const int64_t *)m->lens.buf : NULL, ndocs,
                              (const char *const *)m->ids, name);
    Py_END_ALLOW_THREADS
    if (st != TT_OK) {
        raise_last(st);
        goto done;
    }
    rc = 0;
done:
    PyMem_Free(ptrs);
    PyMem_Free(rows);
    if (rc < 0)
        mem_input_release(m);
    return rc;
}

/* An input from .npy files: lists of vector and doclens paths and an ids path or None. */
static int files_input_open(tt_input **in, PyObject *vpaths, PyObject *lpaths, PyObject *ids_path,
                            int bf16) {
    *in = NULL;
    if (!PyList_Check(vpaths) || !PyList_Check(lpaths) ||
        PyList_GET_SIZE(vpaths) != PyList_GET_SIZE(lpaths)) {
        PyErr_SetString(PyExc_TypeError, "vector and doclens paths: two lists of equal length");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(vpaths);
    const char **vp = PyMem_Calloc((size_t)(n ? n : 1), sizeof *vp);
    const char **lp = PyMem_Calloc((size_t)(n ? n : 1), sizeof *lp);
    int rc = -1;
    if (!vp || !lp) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyList_GET_ITEM(vpaths, i), *b = PyList_GET_ITEM(lpaths, i);
        if (!PyUnicode_Check(a) || !PyUnicode_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "paths must be str");
            goto done;
        }
        if (!(vp[i] = PyUnicode_AsUTF8(a)) || !(lp[i] = PyUnicode_AsUTF8(b)))
            goto done;
    }
    const char *ip = NULL;
    if (ids_path != Py_None) {
        if (!PyUnicode_Check(ids_path)) {
            PyErr_SetString(PyExc_TypeError, "ids path must be a str");
            goto done;
        }
        if (!(ip = PyUnicode_AsUTF8(ids_path)))
            goto done;
    }
    tt_input_options io;
    tt_input_options_init(&io);
    io.bf16_from_uint16 = bf16;
    int st;
    Py_BEGIN_ALLOW_THREADS
    st = tt_input_open(in, (size_t)n, vp, lp, ip, &io);
    Py_END_ALLOW_THREADS
    if (st != TT_OK) {
        raise_last(st);
        goto done;
    }
    rc = 0;
done:
    PyMem_Free(vp);
    PyMem_Free(lp);
    return rc;
}

/* source: ("memory", blocks, dim, f16, doclens, ids, name) or ("files", vpaths, lpaths,
 * ids_path, bf16). */
static int open_source(PyObject *source, mem_input *m, tt_input **in) {
    memset(m, 0, sizeof *m);
    const char *kind;
    PyObject *a, *b, *c, *d = NULL, *e = NULL;
    unsigned dim = 0;
    int f16 = 0;
    if (!PyTuple_Check(source) || PyTuple_GET_SIZE(source) < 1 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(source, 0))) {
        PyErr_SetString(PyExc_TypeError, "source must be a tuple");
        return -1;
    }
    kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(source, 0));
    if (kind && !strcmp(kind, "memory")) {
        const char *name;
        if (!PyArg_ParseTuple(source, "sOIpOOs", &kind, &a, &dim, &f16, &d, &e, &name))
            return -1;
        return mem_input_open(m, in, a, dim, f16, d, e, name);
    }
    if (!PyArg_ParseTuple(source, "sOOOp", &kind, &a, &b, &c, &f16))
        return -1;
    return files_input_open(in, a, b, c, f16);
}

static PyObject *build_stats_dict(const tt_build_stats *s) {
    return Py_BuildValue("{s:d,s:d,s:d,s:d,s:K,s:K,s:I,s:d,s:K}", "seconds", s->seconds_total,
                         "seconds_train", s->seconds_train, "seconds_encode", s->seconds_encode,
                         "seconds_ivf", s->seconds_ivf, "train_vectors",
                         (unsigned long long)s->train_vectors, "heldout_vectors",
                         (unsigned long long)s->heldout_vectors, "centroids", s->num_centroids,
                         "heldout_mse", s->heldout_mse, "index_bytes",
                         (unsigned long long)s->index_bytes);
}

static PyObject *change_stats_dict(const tt_change_stats *s) {
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d}", "generation",
                         (unsigned long long)s->generation, "added", (unsigned long long)s->added,
                         "replaced", (unsigned long long)s->replaced, "deleted",
                         (unsigned long long)s->deleted, "unknown", (unsigned long long)s->unknown,
                         "live_docs", (unsigned long long)s->live_docs, "segments",
                         (unsigned long long)s->segments, "added_mse", s->added_mse, "seconds",
                         s->seconds);
}

/* build(path, source, options, progress) -> stats dict */
static PyObject *py_build(PyObject *self, PyObject *args) {
    const char *path;
    PyObject *source, *opts, *progress = Py_None;
    if (!PyArg_ParseTuple(args, "sOO|O", &path, &source, &opts, &progress))
        return NULL;
    job j;
    memset(&j, 0, sizeof j);
    if (progress != Py_None)
        j.progress = progress;
    tt_build_options_init(&j.bo);
    if (progress != Py_None) {
        j.bo.progress = job_progress;
        j.bo.progress_user = &j;
    }
    if (apply_opts(&j.bo, build_spec, opts, "build") < 0)
        return NULL;
    mem_input m;
    if (open_source(source, &m, &j.in) < 0)
        return NULL;
    j.path = path;
    j.fn = job_build;
    j.bo.cancel = &j.cancel;
    PyObject *res = NULL;
    if (run_job(&j) == 0)
        res = j.status == TT_OK ? build_stats_dict(&j.bstats) : raise_status(j.status, j.message);
    tt_input_free(j.in);
    mem_input_release(&m);
    return res;
}

/* add(dir, source, options, progress) -> stats dict */
static PyObject *py_add(PyObject *self, PyObject *args) {
    const char *path;
    PyObject *source, *opts, *progress = Py_None;
    if (!PyArg_ParseTuple(args, "sOO|O", &path, &source, &opts, &progress))
        return NULL;
    job j;
    memset(&j, 0, sizeof j);
    tt_change_options_init(&j.co);
    if (progress != Py_None) {
        j.progress = progress;
        j.co.progress = job_progress;
        j.co.progress_user = &j;
    }
    if (apply_opts(&j.co, change_spec, opts, "add") < 0)
        return NULL;
    mem_input m;
    if (open_source(source, &m, &j.in) < 0)
        return NULL;
    j.path = path;
    j.fn = job_add;
    j.co.cancel = &j.cancel;
    PyObject *res = NULL;
    if (run_job(&j) == 0)
        res = j.status == TT_OK ? change_stats_dict(&j.cstats) : raise_status(j.status, j.message);
    tt_input_free(j.in);
    mem_input_release(&m);
    return res;
}

/* delete(dir, ids, options) -> stats dict */
static PyObject *py_delete(PyObject *self, PyObject *args) {
    const char *path;
    PyObject *ids, *opts, *keep = NULL;
    if (!PyArg_ParseTuple(args, "sOO", &path, &ids, &opts))
        return NULL;
    job j;
    memset(&j, 0, sizeof j);
    tt_change_options_init(&j.co);
    if (apply_opts(&j.co, change_spec, opts, "delete") < 0)
        return NULL;
    const char **p;
    if (ids == Py_None) {
        PyErr_SetString(PyExc_TypeError, "delete: ids must be a sequence of str");
        return NULL;
    }
    if (get_ids(ids, &keep, &p, &j.nids, "delete") < 0)
        return NULL;
    j.ids = p;
    j.path = path;
    j.fn = job_delete;
    j.co.cancel = &j.cancel;
    PyObject *res = NULL;
    if (run_job(&j) == 0)
        res = j.status == TT_OK ? change_stats_dict(&j.cstats) : raise_status(j.status, j.message);
    PyMem_Free(p);
    Py_XDECREF(keep);
    return res;
}

/* compact(dir, options, progress) -> stats dict */
static PyObject *py_compact(PyObject *self, PyObject *args) {
    const char *path;
    PyObject *opts, *progress = Py_None;
    if (!PyArg_ParseTuple(args, "sO|O", &path, &opts, &progress))
        return NULL;
    job j;
    memset(&j, 0, sizeof j);
    tt_change_options_init(&j.co);
    if (progress != Py_None) {
        j.progress = progress;
        j.co.progress = job_progress;
        j.co.progress_user = &j;
    }
    if (apply_opts(&j.co, change_spec, opts, "compact") < 0)
        return NULL;
    j.path = path;
    j.fn = job_compact;
    j.co.cancel = &j.cancel;
    PyObject *res = NULL;
    if (run_job(&j) == 0)
        res = j.status == TT_OK ? change_stats_dict(&j.cstats) : raise_status(j.status, j.message);
    return res;
}

static PyObject *tuned_dict(const tt_tuned *t) {
    PyObject *first = t->first < 0 ? Py_NewRef(Py_None) : PyFloat_FromDouble(t->first);
    if (!first)
        return NULL;
    PyObject *d = Py_BuildValue("{s:I,s:i,s:I,s:d,s:d,s:d,s:O,s:d,s:O,s:O,s:d,s:I}", "k", t->k,
                                "nprobe", t->nprobe, "ndocs", t->ndocs, "prune_ratio",
                                (double)t->prune_ratio, "rerank_margin", (double)t->rerank_margin,
                                "recall", t->recall, "first", first, "ms", t->ms, "reached",
                                t->reached ? Py_True : Py_False, "exhaustive",
                                t->exhaustive ? Py_True : Py_False, "exhaustive_ms",
                                t->exhaustive_ms, "centroid_groups", t->centroid_groups);
    Py_DECREF(first);
    return d;
}

static PyObject *tune_dict(const tt_tune_info *t) {
    if (!t->tuned)
        Py_RETURN_NONE;
    PyObject *a = tuned_dict(&t->k10), *b = tuned_dict(&t->k100), *d = NULL;
    if (a && b)
        d = Py_BuildValue("{s:d,s:s,s:I,s:I,s:d,s:K,s:K,s:K,s:s,s:O,s:O}", "target", t->target,
                          "source", t->pseudo ? "pseudo" : "queries", "num_queries",
                          t->num_queries, "query_len", t->query_len, "noise", t->noise, "seed",
                          (unsigned long long)t->seed, "live_docs",
                          (unsigned long long)t->live_docs, "generation",
                          (unsigned long long)t->generation, "cost",
                          t->cost == TT_TUNE_COST_WORK ? "work" : "time", "k10", a, "k100", b);
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (d && t->short_len) {
        PyObject *sa = tuned_dict(&t->k10_short), *sb = tuned_dict(&t->k100_short),
                 *sl = PyLong_FromUnsignedLong(t->short_len);
        if (!sa || !sb || !sl || PyDict_SetItemString(d, "short_len", sl) < 0 ||
            PyDict_SetItemString(d, "k10_short", sa) < 0 ||
            PyDict_SetItemString(d, "k100_short", sb) < 0)
            Py_CLEAR(d);
        Py_XDECREF(sa);
        Py_XDECREF(sb);
        Py_XDECREF(sl);
    }
    if (d && t->centroid_groups) {
        PyObject *g = PyLong_FromUnsignedLong(t->centroid_groups);
        if (!g || PyDict_SetItemString(d, "centroid_groups", g) < 0)
            Py_CLEAR(d);
        Py_XDECREF(g);
    }
    return d;
}

/* tune(dir, target, num_queries, query_len, noise, seed, cost, threads, if_stale,
 *      progress) -> calibration dict (pseudo-queries; tt_index_tune) */
static PyObject *py_tune(PyObject *self, PyObject *args) {
    const char *path, *cost;
    double target, noise;
    unsigned int nq, qlen;
    unsigned long long seed;
    int threads, if_stale;
    PyObject *progress = Py_None;
    if (!PyArg_ParseTuple(args, "sdIIdKsip|O", &path, &target, &nq, &qlen, &noise, &seed, &cost,
                          &threads, &if_stale, &progress))
        return NULL;
    job j;
    memset(&j, 0, sizeof j);
    tt_tune_options_init(&j.to);
    j.to.target_recall = target;
    j.to.num_queries = nq;
    j.to.query_len = qlen;
    j.to.noise = (float)noise;
    j.to.seed = seed;
    j.to.threads = threads;
    j.to.if_stale = if_stale;
    if (!strcmp(cost, "time"))
        j.to.cost = TT_TUNE_COST_TIME;
    else if (!strcmp(cost, "work"))
        j.to.cost = TT_TUNE_COST_WORK;
    else
        return raise_status(TT_EINVAL, "tune: cost must be 'time' or 'work'");
    if (progress != Py_None) {
        j.progress = progress;
        j.to.progress = job_progress;
        j.to.progress_user = &j;
    }
    j.path = path;
    j.fn = job_tune;
    j.to.cancel = &j.cancel;
    PyObject *res = NULL;
    if (run_job(&j) == 0)
        res = j.status == TT_OK ? tune_dict(&j.tinfo) : raise_status(j.status, j.message);
    return res;
}

/* ------------------------------------------------------------------ Index */

/* An open generation, its pool of search contexts and its pool of metadata handles
 * (tt_metadata: one per thread at a time); reference-counted under the GIL. */
typedef struct snap {
    tt_index *idx;
    tt_search_ctx **pool;
    int npool, cap;
    tt_metadata **mds;
    int nmds, capmds;
    long refs;
    tt_index_info info;
} snap;

static void snap_unref(snap *s) {
    if (!s || --s->refs > 0)
        return;
    for (int i = 0; i < s->npool; i++)
        tt_search_ctx_free(s->pool[i]);
    PyMem_Free(s->pool);
    for (int i = 0; i < s->nmds; i++) /* before the index they read */
        tt_metadata_close(s->mds[i]);
    PyMem_Free(s->mds);
    tt_index_close(s->idx);
    PyMem_Free(s);
}

/* A metadata handle from the pool, or a newly opened one (NULL with an exception set:
 * NotFoundError when the index has no metadata, or, when absent is not NULL, no
 * exception and *absent = 1 in that case). GIL held. */
static tt_metadata *md_get(snap *s, int *absent) {
    if (s->nmds > 0)
        return s->mds[--s->nmds];
    tt_metadata *m = NULL;
    int st = tt_metadata_open(s->idx, &m);
    if (st == TT_ENOTFOUND && absent) {
        *absent = 1;
        return NULL;
    }
    if (st != TT_OK) {
        raise_last(st);
        return NULL;
    }
    return m;
}

static void md_put(snap *s, tt_metadata *m) {
    if (s->nmds == s->capmds) {
        int cap = s->capmds ? 2 * s->capmds : 2;
        tt_metadata **p = PyMem_Realloc(s->mds, (size_t)cap * sizeof *p);
        if (!p) {
            tt_metadata_close(m);
            return;
        }
        s->mds = p;
        s->capmds = cap;
    }
    s->mds[s->nmds++] = m;
}

/* A context from the pool, or a new one (NULL with an exception set). GIL held. */
static tt_search_ctx *ctx_get(snap *s) {
    if (s->npool > 0)
        return s->pool[--s->npool];
    tt_search_ctx *c = NULL;
    int st = tt_search_ctx_new(s->idx, &c);
    if (st != TT_OK) {
        raise_last(st);
        return NULL;
    }
    return c;
}

static void ctx_put(snap *s, tt_search_ctx *c) {
    if (s->npool == s->cap) {
        int cap = s->cap ? 2 * s->cap : 4;
        tt_search_ctx **p = PyMem_Realloc(s->pool, (size_t)cap * sizeof *p);
        if (!p) {
            tt_search_ctx_free(c);
            return;
        }
        s->pool = p;
        s->cap = cap;
    }
    s->pool[s->npool++] = c;
}

typedef struct {
    PyObject_HEAD
    snap *cur;
    PyObject *path;
    tt_open_options oo;
    double last_seconds; /* time of the last tt_search of _search (benchmarks) */
} IndexObject;

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int snap_open(IndexObject *self, snap **out) {
    const char *dir = PyUnicode_AsUTF8(self->path);
    if (!dir)
        return -1;
    snap *s = PyMem_Calloc(1, sizeof *s);
    if (!s) {
        PyErr_NoMemory();
        return -1;
    }
    int st;
    Py_BEGIN_ALLOW_THREADS
    st = tt_index_open(&s->idx, dir, &self->oo);
    if (st == TT_OK)
        st = tt_index_get_info(s->idx, &s->info);
    Py_END_ALLOW_THREADS
    if (st != TT_OK) {
        raise_last(st);
        tt_index_close(s->idx);
        PyMem_Free(s);
        return -1;
    }
    s->refs = 1;
    *out = s;
    return 0;
}

static int Index_init(IndexObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "options", NULL};
    PyObject *path, *opts = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "U|O", kwlist, &path, &opts))
        return -1;
    tt_open_options_init(&self->oo);
    if (apply_opts(&self->oo, open_spec, opts, "Index") < 0)
        return -1;
    Py_INCREF(path);
    Py_XSETREF(self->path, path);
    snap *s;
    if (snap_open(self, &s) < 0)
        return -1;
    snap_unref(self->cur);
    self->cur = s;
    return 0;
}

static void Index_dealloc(IndexObject *self) {
    snap_unref(self->cur);
    self->cur = NULL;
    Py_XDECREF(self->path);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static snap *cur_snap(IndexObject *self) {
    if (!self->cur) {
        PyErr_SetString(PyExc_ValueError, "tartan.Index: the index is closed");
        return NULL;
    }
    return self->cur;
}

static PyObject *Index_close(IndexObject *self, PyObject *unused) {
    snap_unref(self->cur);
    self->cur = NULL;
    Py_RETURN_NONE;
}

/* reopen(): the index's current generation (after add, delete, compact). */
static PyObject *Index_reopen(IndexObject *self, PyObject *unused) {
    snap *s;
    if (!self->path) {
        PyErr_SetString(PyExc_ValueError, "tartan.Index: not initialised");
        return NULL;
    }
    if (snap_open(self, &s) < 0)
        return NULL;
    snap_unref(self->cur);
    self->cur = s;
    Py_RETURN_NONE;
}

static PyObject *id_str(const tt_index *idx, uint64_t row) {
    size_t len = 0;
    const char *p = tt_index_doc_id(idx, row, &len);
    if (!p)
        return raise_last(TT_EINVAL);
    return PyUnicode_DecodeUTF8(p, (Py_ssize_t)len, "surrogateescape");
}

/* ------------------------------------------------------------------ filters */

/* A filter (tt_filter) over the rows of one snapshot, which it holds: searches of that
 * snapshot only accept it, since a change or a compaction renumbers rows. Made by
 * Index.filter; read-only afterwards, so threads may share it. */
typedef struct {
    PyObject_HEAD
    snap *s;
    tt_filter *f;
    unsigned long long unknown; /* distinct ids= entries that name no live document */
    unsigned long long nids;    /* ids= entries given */
} FilterObject;

static void Filter_dealloc(FilterObject *self) {
    tt_filter_free(self->f);
    snap_unref(self->s);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t Filter_len(FilterObject *self) { return (Py_ssize_t)tt_filter_count(self->f); }

static PyObject *Filter_get_allowed(FilterObject *self, void *unused) {
    return PyLong_FromUnsignedLongLong(tt_filter_count(self->f));
}

static PyObject *Filter_get_unknown(FilterObject *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->unknown);
}

static PyObject *Filter_get_nids(FilterObject *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->nids);
}

static PyObject *Filter_get_num_rows(FilterObject *self, void *unused) {
    return PyLong_FromUnsignedLongLong(tt_filter_num_rows(self->f));
}

static PyObject *Filter_get_generation(FilterObject *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->s->info.generation);
}

/* rows(): the allowed rows, ascending, as an int64 array. */
static PyObject *Filter_rows(FilterObject *self, PyObject *unused) {
    npy_intp n = (npy_intp)tt_filter_count(self->f);
    PyObject *a = PyArray_SimpleNew(1, &n, NPY_INT64);
    if (!a)
        return NULL;
    int64_t *p = PyArray_DATA((PyArrayObject *)a);
    npy_intp j = 0;
    uint64_t nr = tt_filter_num_rows(self->f);
    for (uint64_t r = 0; r < nr && j < n; r++)
        if (tt_filter_has(self->f, r))
            p[j++] = (int64_t)r;
    return a;
}

static PyObject *Filter_repr(FilterObject *self) {
    return PyUnicode_FromFormat("<tartan.Filter: %llu of %llu rows allowed, generation %llu>",
                                (unsigned long long)tt_filter_count(self->f),
                                (unsigned long long)tt_filter_num_rows(self->f),
                                (unsigned long long)self->s->info.generation);
}

static PyMethodDef Filter_methods[] = {
    {"rows", (PyCFunction)Filter_rows, METH_NOARGS, "The allowed rows, ascending (int64 array)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Filter_getset[] = {
    {"allowed", (getter)Filter_get_allowed, NULL, "allowed live documents (also len())", NULL},
    {"unknown", (getter)Filter_get_unknown, NULL,
     "distinct ids that name no live document (counted, not an error)", NULL},
    {"num_ids", (getter)Filter_get_nids, NULL, "ids given (0 without ids=)", NULL},
    {"num_rows", (getter)Filter_get_num_rows, NULL, "rows of the generation it is over", NULL},
    {"generation", (getter)Filter_get_generation, NULL, "the index generation it is over", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods Filter_as_sequence = {.sq_length = (lenfunc)Filter_len};

static PyTypeObject FilterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tartan.Filter",
    .tp_basicsize = sizeof(FilterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The documents a search may return, over one snapshot of an index: made by\n"
              "Index.filter(where=..., ids=...), passed as search(..., filter=f). Searches\n"
              "of another snapshot (after a change, reopen(), or another Index) refuse it.",
    .tp_dealloc = (destructor)Filter_dealloc,
    .tp_repr = (reprfunc)Filter_repr,
    .tp_methods = Filter_methods,
    .tp_getset = Filter_getset,
    .tp_as_sequence = &Filter_as_sequence,
};

/* The tt_filter of fo for a search of s: *out = NULL for None/NULL. Returns -1 with
 * an exception when fo is not a Filter or is over another snapshot. */
static int get_filter(PyObject *fo, const snap *s, const tt_filter **out) {
    *out = NULL;
    if (!fo || fo == Py_None)
        return 0;
    if (!PyObject_TypeCheck(fo, &FilterType)) {
        PyErr_Format(PyExc_TypeError, "filter: expected a tartan.Filter (Index.filter), got %.100s",
                     Py_TYPE(fo)->tp_name);
        return -1;
    }
    const FilterObject *f = (const FilterObject *)fo;
    if (f->s != s) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "filter: made over generation %llu of an index as another snapshot opened it "
                 "(before a change or reopen(), or by another Index); this search reads "
                 "generation %llu, whose rows may differ: make the filter again with this "
                 "Index's filter()",
                 (unsigned long long)f->s->info.generation, (unsigned long long)s->info.generation);
        raise_status(TT_EINVAL, msg);
        return -1;
    }
    *out = f->f;
    return 0;
}

/* filter(where=None, ids=None) -> Filter: the live documents for which the SQL
 * expression where holds over the metadata (tt_metadata_where) and/or whose ids are
 * among ids (tt_filter_from_ids; unknown ids counted in .unknown); both: documents
 * allowed by both, as `tartan search --where --filter-ids`. The GIL is released. */
static PyObject *Index_filter(IndexObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"where", "ids", NULL};
    PyObject *wo = Py_None, *io = Py_None, *keep = NULL, *res = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:filter", kwlist, &wo, &io))
        return NULL;
    snap *s = cur_snap(self);
    if (!s)
        return NULL;
    const char *where = NULL, **ids = NULL;
    size_t nids = 0;
    if (wo == Py_None && io == Py_None)
        return raise_status(TT_EINVAL, "filter: give where= (an SQL expression over the "
                                       "index's metadata) and/or ids= (document ids)");
    if (wo != Py_None) {
        Py_ssize_t len = 0;
        if (!PyUnicode_Check(wo)) {
            PyErr_Format(PyExc_TypeError, "where: expected a str (an SQL expression), got %.100s",
                         Py_TYPE(wo)->tp_name);
            return NULL;
        }
        if (!(where = PyUnicode_AsUTF8AndSize(wo, &len)))
            return NULL;
        if ((size_t)len != strlen(where))
            return raise_status(TT_EINVAL, "where: the expression contains a NUL character");
    }
    if (io != Py_None && get_ids(io, &keep, &ids, &nids, "filter ids") < 0)
        return NULL;
    tt_metadata *md = NULL;
    if (where && !(md = md_get(s, NULL)))
        goto done;
    s->refs++; /* the snapshot stays while the GIL is released */
    tt_filter *w = NULL, *f = NULL, *out = NULL;
    uint64_t unknown = 0;
    char msg[2048] = "";
    int st = TT_OK;
    Py_BEGIN_ALLOW_THREADS
    if (where)
        st = tt_metadata_where(md, where, &w);
    if (st == TT_OK && ids)
        st = tt_filter_from_ids(s->idx, ids, nids, &f, &unknown);
    if (st == TT_OK && w && f) {
        if ((st = tt_filter_intersect(w, f)) == TT_OK)
            out = w;
    } else if (st == TT_OK)
        out = w ? w : f;
    if (st != TT_OK)
        snprintf(msg, sizeof msg, "%s", tt_last_error());
    Py_END_ALLOW_THREADS
    if (md)
        md_put(s, md);
    if (out != w)
        tt_filter_free(w);
    if (out != f)
        tt_filter_free(f);
    FilterObject *fo = st == TT_OK ? PyObject_New(FilterObject, &FilterType) : NULL;
    if (!fo) {
        tt_filter_free(out);
        snap_unref(s);
        if (st != TT_OK)
            raise_status(st, msg);
        goto done;
    }
    fo->s = s; /* the reference taken above */
    fo->f = out;
    fo->unknown = unknown;
    fo->nids = nids;
    res = (PyObject *)fo;
done:
    PyMem_Free(ids);
    Py_XDECREF(keep);
    return res;
}

/* _metadata_rows(rows) -> list of JSON objects (str) of int64 rows; -1 gives None.
 * NotFoundError when the index has no metadata. */
static PyObject *Index_metadata_rows(IndexObject *self, PyObject *arg) {
    snap *s = cur_snap(self);
    if (!s)
        return NULL;
    Py_buffer r;
    if (get_buf(arg, &r, "q", 8, 0, "rows") < 0)
        return NULL;
    PyObject *out = NULL;
    tt_metadata *md = md_get(s, NULL);
    if (!md)
        goto done;
    Py_ssize_t n = r.len / 8;
    const int64_t *rows = r.buf;
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *t = NULL;
        char *js = NULL;
        int st;
        if (rows[i] == -1) {
            t = Py_None;
            Py_INCREF(t);
        } else if (rows[i] < -1 || (uint64_t)rows[i] >= s->info.num_docs) {
            PyErr_Format(PyExc_IndexError, "row %lld is not a document of the index (0..%llu)",
                         (long long)rows[i], (unsigned long long)s->info.num_docs - 1);
        } else if ((st = tt_metadata_json(md, (uint64_t)rows[i], &js)) != TT_OK) {
            raise_last(st);
        } else {
            t = PyUnicode_FromString(js);
        }
        tt_free(js);
        if (!t) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, t);
    }
    md_put(s, md);
done:
    PyBuffer_Release(&r);
    return out;
}

/* metadata_columns() -> {name: type} in the order the columns appeared; {} when the
 * index has no metadata. */
static PyObject *Index_metadata_columns(IndexObject *self, PyObject *unused) {
    snap *s = cur_snap(self);
    if (!s)
        return NULL;
    int absent = 0;
    tt_metadata *md = md_get(s, &absent);
    if (!md)
        return absent ? PyDict_New() : NULL;
    PyObject *d = PyDict_New();
    size_t n = tt_metadata_num_columns(md);
    for (size_t i = 0; d && i < n; i++) {
        const char *type = NULL, *name = tt_metadata_column(md, i, &type);
        PyObject *t = PyUnicode_FromString(type ? type : "null");
        if (!t || PyDict_SetItemString(d, name, t) < 0)
            Py_CLEAR(d);
        Py_XDECREF(t);
    }
    md_put(s, md);
    return d;
}

/* search(q, k, options, rows_out, scores_out, want_ids[, filter]) -> (nhits, ids list
 * or None). q: C-contiguous float32 buffer of nq*dim values; filter: a Filter of this
 * snapshot or None. */
static PyObject *Index_search(IndexObject *self, PyObject *args) {
    PyObject *qo, *opts, *ro, *so, *fo = Py_None;
    unsigned k;
    int want_ids;
    if (!PyArg_ParseTuple(args, "OIOOOp|O", &qo, &k, &opts, &ro, &so, &want_ids, &fo))
        return NULL;
    snap *s = cur_snap(self);
    if (!s)
        return NULL;
    tt_search_options sopt;
    tt_search_options_init(&sopt);
    if (apply_opts(&sopt, search_spec, opts, "search") < 0 ||
        get_filter(fo, s, &sopt.filter) < 0)
        return NULL;
    Py_buffer q, r, sc;
    if (get_buf(qo, &q, "f", 4, 0, "queries") < 0)
        return NULL;
    if (get_buf(ro, &r, "q", 8, 1, "rows") < 0) {
        PyBuffer_Release(&q);
        return NULL;
    }
    if (get_buf(so, &sc, "f", 4, 1, "scores") < 0) {
        PyBuffer_Release(&q);
        PyBuffer_Release(&r);
        return NULL;
    }
    PyObject *res = NULL;
    tt_hit *hits = NULL;
    tt_search_ctx *ctx = NULL;
    uint32_t dim = s->info.dim;
    Py_ssize_t nv = q.len / 4;
    if (nv == 0 || nv % dim) {
        PyErr_Format(PyExc_ValueError, "queries: %zd values are not rows of dim %u", nv, dim);
        goto done;
    }
    if ((Py_ssize_t)k > r.len / 8 || (Py_ssize_t)k > sc.len / 4) {
        PyErr_SetString(PyExc_ValueError, "search: output buffers smaller than k");
        goto done;
    }
    if (k == 0) {
        raise_status(TT_EINVAL, "search: k must be at least 1");
        goto done;
    }
    if (!(hits = PyMem_Malloc((size_t)k * sizeof *hits))) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(ctx = ctx_get(s)))
        goto done;
    s->refs++;
    int st;
    uint32_t nh = 0;
    char msg[2048] = "";
    double t0 = 0, t1 = 0;
    Py_BEGIN_ALLOW_THREADS
    t0 = mono_now();
    st = tt_search(s->idx, ctx, (const float *)q.buf, (uint32_t)(nv / dim), k, &sopt, hits, &nh);
    t1 = mono_now();
    if (st != TT_OK)
        snprintf(msg, sizeof msg, "%s", tt_last_error());
    Py_END_ALLOW_THREADS
    self->last_seconds = t1 - t0;
    ctx_put(s, ctx);
    if (st != TT_OK) {
        snap_unref(s);
        raise_status(st, msg);
        goto done;
    }
    int64_t *ro_ = r.buf;
    float *so_ = sc.buf;
    for (uint32_t i = 0; i < nh; i++) {
        ro_[i] = (int64_t)hits[i].doc;
        so_[i] = hits[i].score;
    }
    PyObject *ids = Py_None;
    Py_INCREF(ids);
    if (want_ids) {
        Py_DECREF(ids);
        ids = PyList_New(nh);
        for (uint32_t i = 0; ids && i < nh; i++) {
            PyObject *t = id_str(s->idx, hits[i].doc);
            if (!t) {
                Py_CLEAR(ids);
                break;
            }
            PyList_SET_ITEM(ids, i, t);
        }
    }
    snap_unref(s);
    if (ids)
        res = Py_BuildValue("(IN)", nh, ids);
done:
    PyMem_Free(hits);
    PyBuffer_Release(&q);
    PyBuffer_Release(&r);
    PyBuffer_Release(&sc);
    return res;
}

/* search_batch(q, qoffs, qlens, k, options, threads, rows_out, scores_out, nhits_out,
 * want_ids[, seconds_out, filter]) -> flat list of n*k ids (None past each query's
 * hits) or None. filter: a Filter of this snapshot (for every query) or None.
 * q: float32 rows; qoffs: uint64 first row of each query; qlens: uint32 rows per
 * query; outputs: int64 n*k, float32 n*k, uint32 n. Runs in slices of 256 queries per
 * thread, checking for Ctrl-C between slices. */
static PyObject *Index_search_batch(IndexObject *self, PyObject *args) {
    PyObject *qo, *oo, *lo, *opts, *ro, *so, *no, *to = Py_None, *fo = Py_None;
    unsigned k;
    int threads, want_ids;
    if (!PyArg_ParseTuple(args, "OOOIOiOOOp|OO", &qo, &oo, &lo, &k, &opts, &threads, &ro, &so,
                          &no, &want_ids, &to, &fo))
        return NULL;
    snap *s = cur_snap(self);
    if (!s)
        return NULL;
    tt_search_options sopt;
    tt_search_options_init(&sopt);
    if (apply_opts(&sopt, search_spec, opts, "search") < 0 ||
        get_filter(fo, s, &sopt.filter) < 0)
        return NULL;
    Py_buffer b[7];
    int nb = 0;
    double *secs = NULL;
    PyObject *res = NULL;
    tt_hit *hits = NULL;
    if (get_buf(qo, &b[nb], "f", 4, 0, "queries") < 0)
        goto done;
    nb++;
    if (get_buf(oo, &b[nb], "Q", 8, 0, "query offsets") < 0)
        goto done;
    nb++;
    if (get_buf(lo, &b[nb], "I", 4, 0, "query lengths") < 0)
        goto done;
    nb++;
    if (get_buf(ro, &b[nb], "q", 8, 1, "rows") < 0)
        goto done;
    nb++;
    if (get_buf(so, &b[nb], "f", 4, 1, "scores") < 0)
        goto done;
    nb++;
    if (get_buf(no, &b[nb], "I", 4, 1, "nhits") < 0)
        goto done;
    nb++;
    if (to != Py_None) { /* per-query seconds inside the library (benchmarks) */
        if (get_buf(to, &b[nb], "d", 8, 1, "seconds") < 0)
            goto done;
        secs = b[nb++].buf;
        if ((uint64_t)b[6].len / 8 != (uint64_t)b[2].len / 4) {
            PyErr_SetString(PyExc_ValueError, "search_batch: seconds has the wrong size");
            goto done;
        }
    }
    uint32_t dim = s->info.dim;
    uint64_t n = (uint64_t)b[2].len / 4, rowsq = (uint64_t)b[0].len / 4 / dim;
    const uint64_t *qoffs = b[1].buf;
    const uint32_t *qlens = b[2].buf;
    if ((uint64_t)b[1].len / 8 != n || (uint64_t)b[3].len / 8 != n * k ||
        (uint64_t)b[4].len / 4 != n * k || (uint64_t)b[5].len / 4 != n) {
        PyErr_SetString(PyExc_ValueError, "search_batch: buffer sizes disagree");
        goto done;
    }
    for (uint64_t i = 0; i < n; i++)
        if (qoffs[i] > rowsq || qlens[i] > rowsq - qoffs[i]) {
            PyErr_Format(PyExc_ValueError, "search_batch: query %llu is out of range",
                         (unsigned long long)i);
            goto done;
        }
    if (k == 0) {
        raise_status(TT_EINVAL, "search: k must be at least 1");
        goto done;
    }
    if (n == 0) {
        res = want_ids ? PyList_New(0) : (Py_INCREF(Py_None), Py_None);
        goto done;
    }
    if (!(hits = PyMem_Malloc((size_t)(n * k) * sizeof *hits))) {
        PyErr_NoMemory();
        goto done;
    }
    uint32_t *nh = b[5].buf;
    int nt = threads > 0 ? threads : 2;
    uint64_t slice = (uint64_t)nt * 256;
    s->refs++;
    for (uint64_t q0 = 0; q0 < n; q0 += slice) {
        uint64_t m = n - q0 < slice ? n - q0 : slice;
        int st;
        char msg[2048] = "";
        Py_BEGIN_ALLOW_THREADS
        st = tt_search_batch(s->idx, (const float *)b[0].buf, qoffs + q0, qlens + q0, m, k, &sopt,
                             threads, hits + q0 * k, nh + q0, secs ? secs + q0 : NULL);
        if (st != TT_OK)
            snprintf(msg, sizeof msg, "%s", tt_last_error());
        Py_END_ALLOW_THREADS
        if (st != TT_OK) {
            snap_unref(s);
            if (q0 > 0) {
                char m2[2200];
                snprintf(m2, sizeof m2, "in the queries from number %llu on: %s",
                         (unsigned long long)q0, msg);
                raise_status(st, m2);
            } else {
                raise_status(st, msg);
            }
            goto done;
        }
        if (q0 + m < n && PyErr_CheckSignals() < 0) {
            snap_unref(s);
            goto done;
        }
    }
    int64_t *ro_ = b[3].buf;
    float *so_ = b[4].buf;
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < k; j++) {
            int have = j < nh[i];
            ro_[i * k + j] = have ? (int64_t)hits[i * k + j].doc : -1;
            so_[i * k + j] = have ? hits[i * k + j].score : -INFINITY;
        }
    if (want_ids) {
        PyObject *ids = PyList_New((Py_ssize_t)(n * k));
        for (uint64_t i = 0; ids && i < n; i++)
            for (uint32_t j = 0; j < k; j++) {
                PyObject *t;
                if (j < nh[i]) {
                    t = id_str(s->idx, hits[i * k + j].doc);
                } else {
                    t = Py_None;
                    Py_INCREF(t);
                }
                if (!t) {
                    Py_CLEAR(ids);
                    break;
                }
                PyList_SET_ITEM(ids, (Py_ssize_t)(i * k + j), t);
            }
        res = ids;
    } else {
        Py_INCREF(Py_None);
        res = Py_None;
    }
    snap_unref(s);
done:
    PyMem_Free(hits);
    for (int i = 0; i < nb; i++)
        PyBuffer_Release(&b[i]);
    return res;
}

/* search(queries, k=10, **options): the common case -- one query as a 2-D float32
 * C-contiguous array of the index's dim, no options -- entirely here: no Python code runs
 * around the search, whose cold caches make each interpreted step slow. Everything else
 * (batches, lists, other dtypes, options, as_dicts, rows) goes to the Python layer's
 * _search_py with the same arguments. */
static PyObject *Index_search_entry(IndexObject *self, PyObject *args, PyObject *kw) {
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    PyObject *qo = na >= 1 ? PyTuple_GET_ITEM(args, 0) : NULL, *ko = na >= 2 ? PyTuple_GET_ITEM(args, 1) : NULL;
    int fast = qo && na <= 2 && self->cur;
    if (fast && kw && PyDict_GET_SIZE(kw) > 0) {
        PyObject *kk = PyDict_GetItemString(kw, "k"); /* borrowed */
        if (kk && PyDict_GET_SIZE(kw) == 1 && !ko)
            ko = kk;
        else
            fast = 0;
    }
    long k = 10;
    if (fast && ko) {
        if (!PyLong_CheckExact(ko)) {
            fast = 0;
        } else {
            k = PyLong_AsLong(ko);
            if (k < 1 || k > (long)UINT32_MAX) {
                PyErr_Clear();
                fast = 0;
            }
        }
    }
    Py_buffer q;
    int have_q = 0;
    if (fast && PyArray_CheckExact(qo)) {
        PyArrayObject *a = (PyArrayObject *)qo;
        fast = PyArray_NDIM(a) == 2 && PyArray_TYPE(a) == NPY_FLOAT32 &&
               PyArray_ISCARRAY_RO(a) && PyArray_ISNOTSWAPPED(a) && PyArray_DIM(a, 0) > 0 &&
               PyArray_DIM(a, 1) == (npy_intp)self->cur->info.dim &&
               PyArray_DIM(a, 0) <= (npy_intp)UINT32_MAX;
        if (fast) {
            q.buf = PyArray_DATA(a);
            q.len = PyArray_NBYTES(a);
            have_q = 1;
        }
    }
    if (!have_q) {
        PyObject *m = PyObject_GetAttrString((PyObject *)self, "_search_py");
        if (!m)
            return NULL;
        PyObject *r = PyObject_Call(m, args, kw);
        Py_DECREF(m);
        return r;
    }
    snap *s = self->cur;
    uint32_t dim = s->info.dim, nh = 0;
    tt_hit *hits = PyMem_Malloc((size_t)k * sizeof *hits);
    if (!hits)
        return PyErr_NoMemory();
    tt_search_ctx *ctx = ctx_get(s);
    if (!ctx) {
        PyMem_Free(hits);
        return NULL;
    }
    Py_INCREF(qo); /* the array's data stays while the GIL is released */
    s->refs++;
    int st;
    char msg[2048] = "";
    double t0 = 0, t1 = 0;
    Py_BEGIN_ALLOW_THREADS
    t0 = mono_now();
    st = tt_search(s->idx, ctx, (const float *)q.buf, (uint32_t)(q.len / 4 / dim), (uint32_t)k,
                   NULL, hits, &nh);
    t1 = mono_now();
    if (st != TT_OK)
        snprintf(msg, sizeof msg, "%s", tt_last_error());
    Py_END_ALLOW_THREADS
    self->last_seconds = t1 - t0;
    Py_DECREF(qo);
    ctx_put(s, ctx);
    PyObject *res = NULL, *ids = NULL, *scores = NULL;
    if (st != TT_OK) {
        raise_status(st, msg);
        goto done;
    }
    npy_intp n = (npy_intp)nh;
    ids = PyArray_SimpleNew(1, &n, NPY_OBJECT);
    scores = PyArray_SimpleNew(1, &n, NPY_FLOAT32);
    if (!ids || !scores)
        goto done;
    PyObject **ip = (PyObject **)PyArray_DATA((PyArrayObject *)ids);
    float *sp = (float *)PyArray_DATA((PyArrayObject *)scores);
    for (uint32_t i = 0; i < nh; i++) {
        PyObject *t = id_str(s->idx, hits[i].doc);
        if (!t)
            goto done;
        Py_XDECREF(ip[i]);
        ip[i] = t;
        sp[i] = hits[i].score;
    }
    res = PyTuple_Pack(2, ids, scores);
done:
    Py_XDECREF(ids);
    Py_XDECREF(scores);
    snap_unref(s);
    PyMem_Free(hits);
    return res;
}

static PyObject *Index_doc_ids(IndexObject *self, PyObject *arg) {
    snap *s = cur_snap(self);
    if (!s)
        return NULL;
    Py_buffer r;
    if (get_buf(arg, &r, "q", 8, 0, "rows") < 0)
        return NULL;
    Py_ssize_t n = r.len / 8;
    const int64_t *rows = r.buf;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *t;
        if (rows[i] < 0 || (uint64_t)rows[i] >= s->info.num_docs) {
            PyErr_Format(PyExc_IndexError, "row %lld is not a document of the index "
                         "(0..%llu)", (long long)rows[i], (unsigned long long)s->info.num_docs - 1);
            t = NULL;
        } else {
            t = id_str(s->idx, (uint64_t)rows[i]);
        }
        if (!t) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, t);
    }
    PyBuffer_Release(&r);
    return out;
}

static PyObject *Index_info(IndexObject *self, PyObject *unused) {
    snap *s = cur_snap(self);
    if (!s)
        return NULL;
    const tt_index_info *i = &s->info;
    const char *codec = i->codec_tables == TT_CODEC_ADAPTIVE  ? "adaptive"
                        : i->codec_tables == TT_CODEC_PER_DIM ? "per-dim"
                                                              : "shared";
    const char *io = i->io == TT_IO_URING ? "uring" : "mmap";
    PyObject *d = Py_BuildValue(
        "{s:I,s:I,s:I,s:I,s:K,s:K,s:K,s:K,s:O,s:s,s:O,s:O,s:s,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,"
        "s:K,s:K,s:K,s:K,s:d,s:d,s:d}",
        "format_version", i->format_version, "dim", i->dim, "nbits", i->nbits, "centroids",
        i->num_centroids, "num_docs", (unsigned long long)i->num_docs, "live_docs",
        (unsigned long long)(i->num_docs - i->num_deleted), "num_deleted",
        (unsigned long long)i->num_deleted, "num_vectors", (unsigned long long)i->num_vectors,
        "normalized", i->normalized ? Py_True : Py_False, "codec", codec, "keep_originals",
        i->keep_originals ? Py_True : Py_False, "has_ids", i->has_ids ? Py_True : Py_False, "io",
        io, "bytes_index", (unsigned long long)i->bytes_index, "bytes_residuals",
        (unsigned long long)i->bytes_residuals, "bytes_codes", (unsigned long long)i->bytes_codes,
        "bytes_centroids", (unsigned long long)i->bytes_centroids, "bytes_ivf",
        (unsigned long long)i->bytes_ivf, "bytes_ids", (unsigned long long)i->bytes_ids,
        "bytes_originals", (unsigned long long)i->bytes_originals, "bytes_f16",
        (unsigned long long)i->bytes_f16, "bytes_f32", (unsigned long long)i->bytes_f32,
        "resident_bytes", (unsigned long long)i->resident_bytes, "generation",
        (unsigned long long)i->generation, "segments", (unsigned long long)i->num_segments,
        "bits_per_dim", i->bits_per_dim, "ratio_f16", i->ratio_f16, "ratio_f32", i->ratio_f32);
    if (!d)
        return NULL;
    PyObject *more = Py_BuildValue(
        "{s:K,s:I,s:d,s:d,s:s,s:s,s:s,s:d,s:O,s:I,s:K,s:d,s:d}", "seed", (unsigned long long)i->seed,
        "pool_factor", i->pool_factor, "build_seconds", i->build_seconds, "heldout_mse",
        i->heldout_mse, "encoder", i->encoder, "created", i->created, "tartan_version",
        i->tartan_version, "drift", i->drift, "retrain_advised",
        i->retrain_advised ? Py_True : Py_False, "lloyd_max_rounds", (unsigned)i->lloyd_max_rounds,
        "input_vectors", (unsigned long long)i->input_vectors, "pool_global", i->pool_global,
        "pool_threshold", i->pool_threshold);
    if (!more || PyDict_Update(d, more) < 0) {
        Py_XDECREF(more);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(more);
    /* The rest of tt_index_info, under the names `tartan info --json` uses where it has
     * one (its "bytes" object's members become bytes_<name>). */
    more = Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:z,s:{s:I,s:I,s:I,s:I,s:I,s:I},s:K,s:K,"
        "s:I,s:I,s:d,s:K,s:d}",
        "bytes_meta", (unsigned long long)i->bytes_meta, "bytes_codec",
        (unsigned long long)i->bytes_codec, "bytes_doclens", (unsigned long long)i->bytes_doclens,
        "bytes_manifest", (unsigned long long)i->bytes_manifest, "bytes_idmap",
        (unsigned long long)i->bytes_idmap, "bytes_tombs", (unsigned long long)i->bytes_tombs,
        "bytes_sketch", (unsigned long long)i->bytes_sketch, "bytes_vscale",
        (unsigned long long)i->bytes_vscale, "bytes_sparse",
        (unsigned long long)i->bytes_sparse, "bytes_metadata",
        (unsigned long long)i->bytes_metadata, "bytes_tune", (unsigned long long)i->bytes_tune,
        "sketch_bytes", i->sketch_bytes, "debias",
        i->debias == TT_DEBIAS_TABLE    ? "table"
        : i->debias == TT_DEBIAS_VECTOR ? "vector"
                                        : "none",
        "dims_by_width", "0", i->dims_by_width[0], "1", i->dims_by_width[1], "2",
        i->dims_by_width[2], "3", i->dims_by_width[3], "4", i->dims_by_width[4], "8",
        i->dims_by_width[8], "train_vectors",
        (unsigned long long)i->train_vectors, "heldout_vectors",
        (unsigned long long)i->heldout_vectors, "kmeans_iters", i->kmeans_iters, "threads",
        i->threads, "sample_factor", i->sample_factor, "added_vectors",
        (unsigned long long)i->added_vectors, "added_mse", i->added_mse);
    if (!more || PyDict_Update(d, more) < 0) {
        Py_XDECREF(more);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(more);
    return d;
}

static Py_ssize_t Index_len(IndexObject *self) {
    snap *s = cur_snap(self);
    if (!s)
        return -1;
    return (Py_ssize_t)(s->info.num_docs - s->info.num_deleted);
}

static PyObject *Index_get_dim(IndexObject *self, void *unused) {
    snap *s = cur_snap(self);
    return s ? PyLong_FromUnsignedLong(s->info.dim) : NULL;
}

static PyObject *Index_get_closed(IndexObject *self, void *unused) {
    return PyBool_FromLong(self->cur == NULL);
}

static PyObject *Index_get_path(IndexObject *self, void *unused) {
    if (!self->path)
        Py_RETURN_NONE;
    Py_INCREF(self->path);
    return self->path;
}

PyDoc_STRVAR(search_doc,
    "search($self, queries, k=10, *, as_dicts=False, rows=False, threads=0, where=None,\n"
    "       filter_ids=None, filter=None, with_metadata=False, **options)\n"
    "--\n"
    "\n"
    "Searches one query, a (nq, dim) array, or a batch: an (n, nq, dim) array or a\n"
    "list of (nq_i, dim) arrays.\n"
    "\n"
    "Returns (ids, scores): for one query ids is a 1-D object array of document ids\n"
    "(str) and scores a float32 array, best first (len = min(k, documents)); for a\n"
    "batch both are (n, k) arrays, padded with None / -inf past a query's hits.\n"
    "rows=True gives int64 document rows (-1 as padding) instead of ids.\n"
    "as_dicts=True gives PyLate's format instead: a list of {\"id\", \"score\"} dicts (a\n"
    "list of such lists for a batch).\n"
    "\n"
    "Options: mode (\"plaid\", \"exhaustive\", \"exact\"), nprobe, threshold, ndocs, score\n"
    "(\"sum\", \"mean\"), pruning (\"auto\", \"absolute\", \"relative\"), prune_ratio, rerank\n"
    "(\"adaptive\", \"fixed\") as in `tartan search`; threads (batch: 0 = all CPUs).\n"
    "Queries that are float32 C-contiguous are used in place; others are converted\n"
    "once. NaN/Inf raises BadValueError; a wrong dim DimensionError.\n"
    "\n"
    "Filters (doc/metadata.md; every query of a batch): where, an SQL expression over\n"
    "the index's metadata (\"year > 2000 AND lang = 'en'\"); filter_ids, the ids of the\n"
    "documents allowed (ids naming no live document are counted: a FilterWarning);\n"
    "both: documents allowed by both. filter, a Filter made by Index.filter(), instead\n"
    "of where/filter_ids (made once, reused). A search returns min(k, allowed) hits;\n"
    "filter_direct_max as `tartan search --filter-direct-max`. with_metadata=True\n"
    "(with as_dicts) adds each hit's \"metadata\" dict.\n"
    "");

static PyMethodDef Index_methods[] = {
    {"close", (PyCFunction)Index_close, METH_NOARGS, "Closes the index (searches running finish first)."},
    {"reopen", (PyCFunction)Index_reopen, METH_NOARGS, "Opens the index's current generation."},
    {"_search", (PyCFunction)Index_search, METH_VARARGS, "Low-level search of one query."},
    {"search", (PyCFunction)(void (*)(void))Index_search_entry, METH_VARARGS | METH_KEYWORDS,
     search_doc},
    {"_search_batch", (PyCFunction)Index_search_batch, METH_VARARGS, "Low-level batch search."},
    {"doc_ids", (PyCFunction)Index_doc_ids, METH_O, "External ids of int64 document rows."},
    {"info", (PyCFunction)Index_info, METH_NOARGS, "The index's tt_index_info as a dict."},
    {"filter", (PyCFunction)(void (*)(void))Index_filter, METH_VARARGS | METH_KEYWORDS,
     "filter(where=None, ids=None) -> Filter\n--\n\n"
     "The live documents for which the SQL expression `where` holds over the index's\n"
     "metadata, and/or whose ids are among `ids` (ids naming no live document are\n"
     "counted in .unknown); with both, the documents allowed by both (as `tartan\n"
     "search --where --filter-ids`). Pass it as search(..., filter=f) to reuse it.\n"
     "Errors: InvalidArgumentError with SQLite's message (syntax error, unknown\n"
     "column) or the reason a statement is refused (writes, ATTACH, pragmas, a second\n"
     "statement); NotFoundError when where= is given and the index has no metadata."},
    {"_metadata_rows", (PyCFunction)Index_metadata_rows, METH_O,
     "JSON metadata (str) of int64 rows; -1 gives None."},
    {"metadata_columns", (PyCFunction)Index_metadata_columns, METH_NOARGS,
     "metadata_columns() -> {name: type}\n--\n\n"
     "The metadata columns in the order they appeared, with their types (\"integer\",\n"
     "\"real\", \"text\", \"boolean\", \"null\"); {} when the index has no metadata."},
    {NULL, NULL, 0, NULL}};

static PyObject *Index_get_last_seconds(IndexObject *self, void *unused) {
    return PyFloat_FromDouble(self->last_seconds);
}

static PyGetSetDef Index_getset[] = {
    {"_last_seconds", (getter)Index_get_last_seconds, NULL,
     "seconds inside tt_search during the last single-query search (benchmarks)", NULL},
    {"dim", (getter)Index_get_dim, NULL, "vector dimension", NULL},
    {"closed", (getter)Index_get_closed, NULL, "True once closed", NULL},
    {"path", (getter)Index_get_path, NULL, "the index directory", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods Index_as_sequence = {.sq_length = (lenfunc)Index_len};

static PyTypeObject IndexType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tartan._tartan.Index",
    .tp_basicsize = sizeof(IndexObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Low-level open index (use tartan.Index).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Index_init,
    .tp_dealloc = (destructor)Index_dealloc,
    .tp_methods = Index_methods,
    .tp_getset = Index_getset,
    .tp_as_sequence = &Index_as_sequence,
};

/* ------------------------------------------------------------------ evaluation */

/* qrels and runs come as a path (read by the library) or as a nested dict
 * {qid: {docid: value}}; one walker reads the dicts, with a per-entry callback that
 * checks the value's type and adds the entry. */

/* An entry callback's result besides a tt_status: the value has the wrong type. */
#define ENTRY_BAD_VALUE 1

typedef int (*entry_fn)(void *coll, const char *qid, const char *docid, PyObject *value);

/* Adds every entry of the dict o {qid str: {docid str: value}} to coll with add.
 * what names the input ("qrels", "run") and value the expected value ("int
 * relevance"). Returns 0, or -1 with an exception (TypeError for a wrong shape or type,
 * the tartan.Error of add's status). */
static int walk_nested(PyObject *o, const char *what, const char *value, entry_fn add,
                       void *coll) {
    PyObject *q, *docs, *d, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &q, &docs)) {
        Py_ssize_t p2 = 0;
        const char *qs = PyUnicode_Check(q) ? PyUnicode_AsUTF8(q) : NULL;
        if (!qs || !PyDict_Check(docs)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: a dict {qid str: {docid str: %s}}", what, value);
            return -1;
        }
        while (PyDict_Next(docs, &p2, &d, &v)) {
            const char *ds = PyUnicode_Check(d) ? PyUnicode_AsUTF8(d) : NULL;
            int st = ds ? add(coll, qs, ds, v) : ENTRY_BAD_VALUE;
            if (st == ENTRY_BAD_VALUE) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "%s[%R]: a dict {docid str: %s}", what, q, value);
                return -1;
            }
            if (st != TT_OK) {
                raise_last(st);
                return -1;
            }
        }
    }
    return 0;
}

/* 1 if o is a path (*path set), 0 if it is a dict, -1 (TypeError) otherwise. */
static int path_or_dict(PyObject *o, const char *what, const char *value, const char **path) {
    if (PyUnicode_Check(o))
        return (*path = PyUnicode_AsUTF8(o)) ? 1 : -1;
    if (PyDict_Check(o))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s: a path or a dict {qid: {docid: %s}}", what, value);
    return -1;
}

static int qrels_entry(void *coll, const char *qid, const char *docid, PyObject *v) {
    long r = PyLong_Check(v) ? PyLong_AsLong(v) : -1;
    if (!PyLong_Check(v) || (r == -1 && PyErr_Occurred()) || r < INT32_MIN || r > INT32_MAX)
        return ENTRY_BAD_VALUE;
    return tt_qrels_add(coll, qid, docid, (int)r);
}

static int run_entry(void *coll, const char *qid, const char *docid, PyObject *v) {
    double s = PyFloat_AsDouble(v);
    if (s == -1.0 && PyErr_Occurred())
        return ENTRY_BAD_VALUE;
    return tt_run_add(coll, qid, docid, s);
}

/* qrels: a path (str) or dict {qid: {docid: int rel}}. */
static int get_qrels(PyObject *o, tt_qrels **out) {
    static const char what[] = "qrels", value[] = "int relevance";
    const char *path = NULL;
    int st = TT_OK, kind = path_or_dict(o, what, value, &path);
    *out = NULL;
    if (kind < 0)
        return -1;
    if (kind == 1) {
        Py_BEGIN_ALLOW_THREADS
        st = tt_qrels_load(out, path);
        Py_END_ALLOW_THREADS
    } else if ((st = tt_qrels_new(out)) == TT_OK &&
               walk_nested(o, what, value, qrels_entry, *out) < 0) {
        tt_qrels_free(*out);
        *out = NULL;
        return -1;
    }
    if (st != TT_OK) {
        raise_last(st);
        return -1;
    }
    return 0;
}

/* run: a path or dict {qid: {docid: float score}}. */
static int get_run(PyObject *o, tt_run **out) {
    static const char what[] = "run", value[] = "float score";
    const char *path = NULL;
    int st = TT_OK, kind = path_or_dict(o, what, value, &path);
    *out = NULL;
    if (kind < 0)
        return -1;
    if (kind == 1) {
        Py_BEGIN_ALLOW_THREADS
        st = tt_run_load(out, path);
        Py_END_ALLOW_THREADS
    } else if ((st = tt_run_new(out)) == TT_OK &&
               walk_nested(o, what, value, run_entry, *out) < 0) {
        tt_run_free(*out);
        *out = NULL;
        return -1;
    }
    if (st != TT_OK) {
        raise_last(st);
        return -1;
    }
    return 0;
}

/* evaluate(qrels, run, metrics list, missing_as_zero, relevance_level)
 *   -> (metric names, query ids, means, per-query value lists, counts dict) */
static PyObject *py_evaluate(PyObject *self, PyObject *args) {
    PyObject *qo, *ro, *mo;
    int missing, level;
    if (!PyArg_ParseTuple(args, "OOOpi", &qo, &ro, &mo, &missing, &level))
        return NULL;
    PyObject *seq = PySequence_Fast(mo, "metrics must be a sequence of str");
    if (!seq)
        return NULL;
    Py_ssize_t nm = PySequence_Fast_GET_SIZE(seq);
    tt_metric *ms = PyMem_Calloc((size_t)(nm ? nm : 1), sizeof *ms);
    tt_qrels *qr = NULL;
    tt_run *run = NULL;
    tt_eval *ev = NULL;
    PyObject *res = NULL, *names = NULL, *qids = NULL, *means = NULL, *vals = NULL;
    if (!ms) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nm; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(seq, i);
        const char *name = PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : NULL;
        if (!name) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "metrics must be str such as 'nDCG@10'");
            goto done;
        }
        int st = tt_metric_parse(name, &ms[i]);
        if (st != TT_OK) {
            raise_last(st);
            goto done;
        }
    }
    if (get_qrels(qo, &qr) < 0 || get_run(ro, &run) < 0)
        goto done;
    tt_eval_options eo;
    tt_eval_options_init(&eo);
    eo.missing_as_zero = missing;
    eo.relevance_level = level;
    int st;
    Py_BEGIN_ALLOW_THREADS
    st = tt_evaluate(&ev, qr, run, ms, (size_t)nm, &eo);
    Py_END_ALLOW_THREADS
    if (st != TT_OK) {
        raise_last(st);
        goto done;
    }
    size_t nq = tt_eval_num_queries(ev);
    names = PyList_New(nm);
    means = PyList_New(nm);
    vals = PyList_New(nm);
    qids = PyList_New((Py_ssize_t)nq);
    if (!names || !means || !vals || !qids)
        goto done;
    for (size_t q = 0; q < nq; q++) {
        PyObject *t = PyUnicode_FromString(tt_eval_query_id(ev, q));
        if (!t)
            goto done;
        PyList_SET_ITEM(qids, (Py_ssize_t)q, t);
    }
    for (Py_ssize_t i = 0; i < nm; i++) {
        char buf[64];
        PyObject *t = PyUnicode_FromString(tt_metric_name(&ms[i], buf, sizeof buf));
        if (!t)
            goto done;
        PyList_SET_ITEM(names, i, t);
        if (!(t = PyFloat_FromDouble(tt_eval_mean(ev, (size_t)i))))
            goto done;
        PyList_SET_ITEM(means, i, t);
        const double *v = tt_eval_values(ev, (size_t)i);
        PyObject *l = PyList_New((Py_ssize_t)nq);
        if (!l)
            goto done;
        PyList_SET_ITEM(vals, i, l);
        for (size_t q = 0; q < nq; q++) {
            if (!(t = PyFloat_FromDouble(v[q])))
                goto done;
            PyList_SET_ITEM(l, (Py_ssize_t)q, t);
        }
    }
    tt_eval_counts c;
    tt_eval_get_counts(ev, &c);
    PyObject *counts = Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n}", "queries", (Py_ssize_t)c.queries,
                                     "qrels_queries", (Py_ssize_t)c.qrels_queries, "run_queries",
                                     (Py_ssize_t)c.run_queries, "missing", (Py_ssize_t)c.missing,
                                     "ignored", (Py_ssize_t)c.ignored, "no_relevant",
                                     (Py_ssize_t)c.no_relevant);
    if (counts)
        res = Py_BuildValue("(OOOON)", names, qids, means, vals, counts);
done:
    Py_XDECREF(names);
    Py_XDECREF(qids);
    Py_XDECREF(means);
    Py_XDECREF(vals);
    tt_eval_free(ev);
    tt_qrels_free(qr);
    tt_run_free(run);
    PyMem_Free(ms);
    Py_DECREF(seq);
    return res;
}

/* ttest(a, b): float64 buffers of equal length -> (t, p) */
static PyObject *py_ttest(PyObject *self, PyObject *args) {
    PyObject *ao, *bo;
    if (!PyArg_ParseTuple(args, "OO", &ao, &bo))
        return NULL;
    Py_buffer a, b;
    if (get_buf(ao, &a, "d", 8, 0, "a") < 0)
        return NULL;
    if (get_buf(bo, &b, "d", 8, 0, "b") < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    PyObject *res = NULL;
    if (a.len != b.len) {
        PyErr_Format(PyExc_ValueError, "ttest: %zd values against %zd", a.len / 8, b.len / 8);
    } else {
        double t = 0, p = 0;
        int st = tt_ttest_paired(a.buf, b.buf, (size_t)(a.len / 8), &t, &p);
        res = st == TT_OK ? Py_BuildValue("(dd)", t, p) : raise_last(st);
    }
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return res;
}

static PyObject *py_option_names(PyObject *self, PyObject *unused) {
    return Py_BuildValue("{s:N,s:N,s:N,s:N}", "build", spec_names(build_spec), "change",
                         spec_names(change_spec), "search", spec_names(search_spec), "open",
                         spec_names(open_spec));
}

static PyObject *py_version(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(tt_version_string());
}

static PyObject *py_blas_threads(PyObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    int st = tt_blas_set_threads((int)n);
    return PyBool_FromLong(st == TT_OK);
}

static PyMethodDef module_methods[] = {
    {"set_error_classes", set_error_classes, METH_VARARGS, "Registers the tartan.Error classes."},
    {"build", py_build, METH_VARARGS, "build(path, source, options) -> stats"},
    {"add", py_add, METH_VARARGS, "add(dir, source, options) -> stats"},
    {"delete", py_delete, METH_VARARGS, "delete(dir, ids, options) -> stats"},
    {"compact", py_compact, METH_VARARGS, "compact(dir, options) -> stats"},
    {"tune", py_tune, METH_VARARGS, "tune(dir, target, ...) -> calibration"},
    {"evaluate", py_evaluate, METH_VARARGS, "evaluate(qrels, run, metrics, missing_as_zero, level)"},
    {"ttest", py_ttest, METH_VARARGS, "ttest(a, b) -> (t, p)"},
    {"option_names", py_option_names, METH_NOARGS, "Option names by kind."},
    {"version", py_version, METH_NOARGS, "Version of the linked libtartan."},
    {"blas_set_threads", py_blas_threads, METH_O, "tt_blas_set_threads"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_tartan",
                                       "Low-level binding of libtartan (use the tartan package).",
                                       -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__tartan(void) {
    import_array();
    if (PyType_Ready(&IndexType) < 0 || PyType_Ready(&FilterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    Py_INCREF(&IndexType);
    if (PyModule_AddObject(m, "Index", (PyObject *)&IndexType) < 0) {
        Py_DECREF(&IndexType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&FilterType);
    if (PyModule_AddObject(m, "Filter", (PyObject *)&FilterType) < 0) {
        Py_DECREF(&FilterType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "VERSION_NUMBER", TT_VERSION_NUMBER);
    return m;
}
