/* tartan serve: the growable output buffer the replies are written into, and JSON
 * string/number output. Written by hand rather than through jansson: a search reply
 * is thousands of (id, score) pairs, and scores must print as tartan search prints
 * them (%.9g: every float32 reads back exactly). */
#include "serve.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_buf_free(srv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static bool reserve(srv_buf *b, size_t extra) {
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + extra + 1) {
        if (nc > SIZE_MAX / 2) {
            b->oom = true;
            return false;
        }
        nc *= 2;
    }
    char *p = realloc(b->p, nc);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = nc;
    return true;
}

void srv_buf_add(srv_buf *b, const char *s, size_t n) {
    if (!reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void srv_buf_puts(srv_buf *b, const char *s) {
    srv_buf_add(b, s, strlen(s));
}

void srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    va_list ap;
    char tmp[256];
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        srv_buf_add(b, tmp, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    unsigned cp = c & (0xff >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

void srv_buf_json_str(srv_buf *b, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    srv_buf_add(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' && p[run] != '\\')
            run++;
        if (run > i) {
            srv_buf_add(b, s + i, run - i);
            i = run;
            continue;
        }
        unsigned c = p[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            srv_buf_add(b, e, 2);
            i++;
        } else if (c < 0x20) {
            srv_buf_printf(b, "\\u%04x", c);
            i++;
        } else {
            size_t l = utf8_len(p + i, n - i);
            if (l) {
                srv_buf_add(b, s + i, l);
                i += l;
            } else {
                srv_buf_puts(b, "\\ufffd");
                i++;
            }
        }
    }
    srv_buf_add(b, "\"", 1);
}

void srv_buf_json_float(srv_buf *b, double v) {
    if (!isfinite(v))
        srv_buf_puts(b, "null");
    else
        srv_buf_printf(b, "%.9g", v);
}
