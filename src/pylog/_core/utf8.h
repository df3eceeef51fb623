/* UTF-8 checking for record header keys, which Kafka defines as strings.
 * Invalid bytes are replaced by U+FFFD (3 bytes), one per invalid byte, so
 * a malformed key from a foreign producer never stops a consumer (Java's
 * decoder also substitutes rather than failing). */
#ifndef PYLOG_UTF8_H
#define PYLOG_UTF8_H

#include <stdint.h>
#include <string.h>

/* Length of the valid UTF-8 sequence starting at p (1-4), or 0 if invalid. */
static inline int pylog_utf8_seq(const unsigned char *p, int64_t avail) {
    unsigned char c = p[0];
    if (c < 0x80) return 1;
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) { n = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) n = 3;
    else if (c == 0xED) { n = 3; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) n = 3;
    else if (c == 0xF0) { n = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) { n = 4; hi = 0x8F; }
    else return 0;
    if (avail < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int k = 2; k < n; k++)
        if ((p[k] & 0xC0) != 0x80) return 0;
    return n;
}

/* Bytes the key takes once invalid bytes are replaced. */
static inline int64_t pylog_utf8_sanitized_len(const char *s, int64_t len) {
    const unsigned char *p = (const unsigned char *)s;
    int64_t out = 0, i = 0;
    while (i < len) {
        if (p[i] < 0x80) { i++; out++; continue; }
        int n = pylog_utf8_seq(p + i, len - i);
        if (n) { i += n; out += n; } else { i++; out += 3; }
    }
    return out;
}

/* Copies s to dst replacing invalid bytes; returns the bytes written. */
static inline int64_t pylog_utf8_sanitize(char *dst, const char *s, int64_t len) {
    const unsigned char *p = (const unsigned char *)s;
    int64_t out = 0, i = 0;
    while (i < len) {
        int n = p[i] < 0x80 ? 1 : pylog_utf8_seq(p + i, len - i);
        if (n) {
            memcpy(dst + out, p + i, (size_t)n);
            i += n;
            out += n;
        } else {
            memcpy(dst + out, "\xEF\xBF\xBD", 3);
            i++;
            out += 3;
        }
    }
    return out;
}

#endif
