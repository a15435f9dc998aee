/* Text checks: UTF-8 validity and what makes a valid id. */
#include "common/common.h"

size_t tt_utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        /* Well-formed sequences of the Unicode standard (table 3-7): no overlong forms,
         * no surrogates, nothing above U+10FFFF. */
        size_t len;
        unsigned lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            if (c == 0xe0)
                lo = 0xa0;
            else if (c == 0xed)
                hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4)
                hi = 0x8f;
        } else {
            return i;
        }
        if (n - i < len || p[i + 1] < lo || p[i + 1] > hi)
            return i;
        for (size_t k = 2; k < len; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xbf)
                return i;
        i += len;
    }
    return SIZE_MAX;
}

const char *tt_id_problem(const char *id, size_t len, size_t max) {
    if (len == 0)
        return "empty id";
    if (len > max)
        return "id too long";
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)id[i];
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r')
            return "id contains whitespace (runs and qrels are whitespace-separated)";
        if (ch < 0x20 || ch == 0x7f)
            return "id contains a control character";
    }
    if (tt_utf8_invalid_at(id, len) != SIZE_MAX)
        return "id is not valid UTF-8";
    return NULL;
}
