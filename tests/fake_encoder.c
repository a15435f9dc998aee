/* A deliberately misbehaving encoder for the failure tests of the encoder protocol
 * (doc/encoder-protocol.md). Usage:
 *
 *   fake_encoder BEHAVIOUR [N] --mode passage|query
 *
 * Well-behaved part: dim 8 (f32, or f16 for "ok16"), max_vectors 3; record text of
 * length L gets n = 1 + L % 3 vectors with v[i][j] = ((L + 3i + j) % 13) - 6 + 0.25.
 * Records are read in batches of 7 (or until EOF) before replying, like a GPU encoder.
 * Every misbehaviour first writes one line "fake: ..." to stderr, which the tests look
 * for in tartan's error message. N counts records answered before misbehaving. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIM 8
#define BATCH 7
#define MAXREC 64

typedef struct rec {
    char *id;
    uint32_t idlen, textlen;
} rec;

static const char *beh = "ok";
static long N = 0;
static int f16 = 0;
static unsigned dim = DIM;
static uint64_t written = 0;

static void say(const char *what) {
    fprintf(stderr, "fake: %s\n", what);
    fflush(stderr);
}

static void put32(uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    fwrite(b, 1, 4, stdout);
}

static void put64(uint64_t v) {
    put32((uint32_t)v);
    put32((uint32_t)(v >> 32));
}

static uint16_t to_f16(float f) {
    /* enough for the small exact values used here (|v| < 8, multiples of 0.25) and NaN */
    if (isnan(f))
        return 0x7e00;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if (f == 0)
        return sign;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(sign | (e << 10) | ((u >> 13) & 0x3ff));
}

static void put_value(float v) {
    if (f16) {
        uint16_t h = to_f16(v);
        unsigned char b[2] = {(unsigned char)h, (unsigned char)(h >> 8)};
        fwrite(b, 1, 2, stdout);
    } else {
        uint32_t u;
        memcpy(&u, &v, 4);
        put32(u);
    }
}

/* Reads exactly n bytes; 0 at a clean EOF before the first byte, 1 on success. */
static int read_full(void *buf, size_t n) {
    size_t got = fread(buf, 1, n, stdin);
    if (got == n)
        return 1;
    if (got == 0 && feof(stdin))
        return 0;
    say("short read on stdin");
    exit(9);
}

static uint32_t get32(const unsigned char *b) {
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
           ((uint32_t)b[3] << 24);
}

/* Next record or 0 at EOF. The text itself is discarded (only its length matters). */
static int next_record(rec *r) {
    unsigned char b[4];
    if (!read_full(b, 4))
        return 0;
    r->idlen = get32(b);
    r->id = malloc(r->idlen + 1);
    if (!r->id || !read_full(r->id, r->idlen) || !read_full(b, 4)) {
        say("truncated record");
        exit(9);
    }
    r->id[r->idlen] = '\0';
    r->textlen = get32(b);
    char buf[4096];
    for (uint32_t left = r->textlen; left;) {
        uint32_t k = left < sizeof buf ? left : (uint32_t)sizeof buf;
        if (!read_full(buf, k)) {
            say("truncated text");
            exit(9);
        }
        left -= k;
    }
    return 1;
}

static int is(const char *b) { return !strcmp(beh, b); }

static void reply(const rec *r, uint32_t nvec, long nan_at) {
    fwrite("VECS", 1, 4, stdout);
    put32(r->idlen);
    fwrite(r->id, 1, r->idlen, stdout);
    put32(nvec);
    unsigned cols = dim;
    if (is("shortvec") && (long)written == N)
        cols = dim - 1;
    for (uint32_t i = 0; i < nvec; i++)
        for (unsigned j = 0; j < cols; j++) {
            float v = (float)((r->textlen + 3 * i + j) % 13) - 6.0f + 0.25f;
            if (nan_at >= 0 && i == 0 && j == 2)
                v = NAN;
            put_value(v);
        }
    written++;
}

/* Answers one record, misbehaving when it is record N+1 (0-based N). */
static void answer(rec *r) {
    long k = (long)written;
    uint32_t nvec = 1 + r->textlen % 3;
    if (k == N) {
        if (is("exit3")) {
            say("failing with status 3");
            exit(3);
        }
        if (is("die")) {
            say("dying mid-stream");
            fwrite("VECS", 1, 4, stdout); /* half a reply */
            put32(r->idlen);
            fflush(stdout);
            kill(getpid(), SIGKILL);
        }
        if (is("hang")) {
            say("hanging");
            fflush(stdout);
            for (;;)
                pause();
        }
        if (is("garbage_mid")) {
            say("writing garbage");
            fputs("oops, a debug print\n", stdout);
            fflush(stdout);
        }
        if (is("absurd")) {
            say("writing an absurd vector count");
            fwrite("VECS", 1, 4, stdout);
            put32(r->idlen);
            fwrite(r->id, 1, r->idlen, stdout);
            put32(0xfffffff0u);
            fflush(stdout);
            for (;;)
                pause();
        }
        if (is("skip")) {
            say("skipping a record");
            written++;
            return;
        }
        if (is("nan")) {
            say("writing a NaN");
            reply(r, nvec, 0);
            return;
        }
        if (is("zero")) {
            say("writing zero vectors");
            reply(r, 0, -1);
            return;
        }
        if (is("shortvec"))
            say("writing too few values");
    }
    reply(r, nvec, -1);
}

int main(int argc, char **argv) {
    const char *mode = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc)
            mode = argv[++i];
        else if (i == 1)
            beh = argv[i];
        else if (i == 2)
            N = atol(argv[i]);
    }
    if (!mode || (strcmp(mode, "passage") && strcmp(mode, "query"))) {
        say("missing --mode passage|query");
        return 2;
    }
    f16 = is("ok16");
    if (is("dim"))
        dim = (unsigned)N;
    if (is("spam")) { /* much more stderr than tartan keeps; must not block the stream */
        for (int i = 0; i < 2000; i++)
            fprintf(stderr, "fake: progress line %d of a chatty encoder\n", i);
        say("last spam line");
    }
    if (is("exit3") && N < 0) {
        say("failing with status 3");
        return 3;
    }
    if (is("garbage")) {
        say("printing to stdout");
        fputs("Loading model weights...\n", stdout);
        fflush(stdout);
        return 0;
    }
    if (is("hanghello")) {
        say("never saying hello");
        for (;;)
            pause();
    }
    if (is("hangchild")) { /* a helper process in the group must die with the encoder */
        pid_t c = fork();
        if (c == 0) {
            for (;;)
                pause();
        }
        fprintf(stderr, "fake: child %ld\n", (long)c);
        say("hanging with a child");
        for (;;)
            pause();
    }
    printf("TARTAN-ENCODER %d %u %s 3 fake encoder (%s)\n", is("version") ? 3 : 1, dim,
           f16 ? "f16" : "f32", beh);
    fflush(stdout);
    if (is("slow"))
        say("slow but steady");

    rec batch[MAXREC];
    uint64_t received = 0;
    int eof = 0;
    while (!eof) {
        int nb = 0;
        int cap = is("closein") ? (int)N : BATCH;
        while (nb < cap && next_record(&batch[nb]))
            nb++;
        received += (uint64_t)nb;
        if (nb < cap)
            eof = 1;
        if (is("closein") && !eof) {
            say("closing stdin early");
            fclose(stdin);
            eof = 1;
        }
        if (is("swap") && nb >= 2 && (long)written <= N && N + 1 < (long)written + nb) {
            int a = (int)(N - (long)written);
            rec t = batch[a];
            batch[a] = batch[a + 1];
            batch[a + 1] = t;
            say("swapping two replies");
        }
        for (int i = 0; i < nb; i++) {
            if (is("slow")) {
                fflush(stdout);
                usleep(150000);
            }
            answer(&batch[i]);
            free(batch[i].id);
        }
        fflush(stdout);
    }
    if (is("extra")) {
        say("writing an extra reply");
        rec r = {(char *)"bogus", 5, 1};
        reply(&r, 1, -1);
    }
    if (is("noend")) {
        say("exiting without the end marker");
        return 0;
    }
    fwrite("DONE", 1, 4, stdout);
    put64(is("badcount") ? written + 1 : written);
    if (is("trailing")) {
        say("writing bytes after the end marker");
        fputs("bye", stdout);
    }
    fflush(stdout);
    if (is("exitafter")) {
        say("exiting with status 5 after the end marker");
        return 5;
    }
    (void)received;
    return 0;
}
