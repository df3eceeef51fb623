/* CRC-32C: SSE4.2 hardware path with a table fallback. See crc32c.h.
 *
 * The crc32 instruction has a latency of about 3 cycles but can start one
 * per cycle, so a single dependency chain runs at a third of the possible
 * speed. The hardware path therefore splits long inputs into three adjacent
 * blocks, runs three independent chains over them in one loop, and joins the
 * three partial CRCs with "append N zero bytes" operators precomputed as
 * lookup tables (CRC is linear over GF(2), so crc(A||B) = shift(crc(A), |B|)
 * xor crc0(B), where crc0 starts from a zero register). */
#include "crc32c.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define PYLOG_CRC_X86 1
#else
#define PYLOG_CRC_X86 0
#endif

#define POLY 0x82F63B78u  /* reflected Castagnoli polynomial */

/* Three-stream block sizes: LONG for big buffers, SHORT so that batch-sized
 * inputs (a few KiB) still use three chains. */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t table_sw[8][256];      /* slicing-by-8 */
static uint32_t shift_long[4][256];    /* register -> register after LONG_BLOCK zero bytes */
static uint32_t shift_short[4][256];   /* ... after SHORT_BLOCK zero bytes */
static int initialised = 0;
static uint32_t (*crc_impl)(uint32_t, const void *, size_t) = pylog_crc32c_extend_sw;
static const char *impl_name = "table";

/* ------------------------------------------------------------------ */
/* GF(2) 32x32 matrices: column i is the image of register bit i.      */

static uint32_t gf2_apply(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1) {
        if (vec & 1u) sum ^= mat[i];
    }
    return sum;
}

static void gf2_square(uint32_t *out, const uint32_t *mat) {
    for (int i = 0; i < 32; i++) out[i] = gf2_apply(mat, mat[i]);
}

/* Builds the operator that advances a register over `nbytes` zero bytes. */
static void zeros_operator(uint32_t *op, size_t nbytes) {
    uint32_t power[32], tmp[32];
    /* One zero bit: r' = (r >> 1) ^ (r & 1 ? POLY : 0). */
    power[0] = POLY;
    for (int i = 1; i < 32; i++) power[i] = 1u << (i - 1);
    /* Square three times: one zero byte. */
    gf2_square(tmp, power);
    gf2_square(power, tmp);
    gf2_square(tmp, power);
    memcpy(power, tmp, sizeof(power));
    /* op = identity, then binary exponentiation over nbytes. */
    for (int i = 0; i < 32; i++) op[i] = 1u << i;
    while (nbytes) {
        if (nbytes & 1) {
            for (int i = 0; i < 32; i++) tmp[i] = gf2_apply(power, op[i]);
            memcpy(op, tmp, sizeof(tmp));
        }
        nbytes >>= 1;
        if (nbytes) {
            gf2_square(tmp, power);
            memcpy(power, tmp, sizeof(tmp));
        }
    }
}

static void build_shift_table(uint32_t table[4][256], size_t nbytes) {
    uint32_t op[32];
    zeros_operator(op, nbytes);
    for (int k = 0; k < 4; k++) {
        for (uint32_t b = 0; b < 256; b++) table[k][b] = gf2_apply(op, b << (8 * k));
    }
}

static inline uint32_t shift_crc(const uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^
           table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

/* ------------------------------------------------------------------ */
/* Portable: slicing-by-8.                                             */

static void build_sw_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table_sw[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table_sw[0][n];
        for (int k = 1; k < 8; k++) {
            c = table_sw[0][c & 0xff] ^ (c >> 8);
            table_sw[k][n] = c;
        }
    }
}

uint32_t pylog_crc32c_extend_sw(uint32_t crc, const void *buf, size_t len) {
    const unsigned char *p = (const unsigned char *)buf;
    uint32_t c = ~crc;
    while (len && ((uintptr_t)p & 7)) {
        c = table_sw[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        len--;
    }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = table_sw[7][w & 0xff] ^ table_sw[6][(w >> 8) & 0xff] ^
            table_sw[5][(w >> 16) & 0xff] ^ table_sw[4][(w >> 24) & 0xff] ^
            table_sw[3][(w >> 32) & 0xff] ^ table_sw[2][(w >> 40) & 0xff] ^
            table_sw[1][(w >> 48) & 0xff] ^ table_sw[0][w >> 56];
        p += 8;
        len -= 8;
    }
#endif
    while (len--) c = table_sw[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

/* ------------------------------------------------------------------ */
/* Hardware: SSE4.2, three interleaved chains.                         */

#if PYLOG_CRC_X86 && defined(__x86_64__)
static inline uint64_t load64(const unsigned char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* Runs three chains over [p, p+block), [p+block, p+2block), [p+2block, p+3block)
 * and joins them; `block` is a multiple of 8 and p is 8-byte aligned. */
#define THREE_WAY(block, table)                                              \
    while (len >= 3 * (size_t)(block)) {                                     \
        uint64_t c1 = 0, c2 = 0;                                             \
        const unsigned char *end = p + (block);                              \
        do {                                                                 \
            c0 = _mm_crc32_u64(c0, load64(p));                               \
            c1 = _mm_crc32_u64(c1, load64(p + (block)));                     \
            c2 = _mm_crc32_u64(c2, load64(p + 2 * (block)));                 \
            p += 8;                                                          \
        } while (p < end);                                                   \
        c0 = shift_crc(table, (uint32_t)c0) ^ (uint32_t)c1;                  \
        c0 = shift_crc(table, (uint32_t)c0) ^ (uint32_t)c2;                  \
        p += 2 * (block);                                                    \
        len -= 3 * (size_t)(block);                                          \
    }

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len) {
    const unsigned char *p = (const unsigned char *)buf;
    uint64_t c0 = (uint32_t)~crc;
    while (len && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        len--;
    }
    THREE_WAY(LONG_BLOCK, shift_long)
    THREE_WAY(SHORT_BLOCK, shift_short)
    while (len >= 8) {
        c0 = _mm_crc32_u64(c0, load64(p));
        p += 8;
        len -= 8;
    }
    while (len--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return ~(uint32_t)c0;
}
#undef THREE_WAY
#define HAVE_HW 1
#else
#define HAVE_HW 0
#endif

/* ------------------------------------------------------------------ */

/* RFC 3720 B.4 vectors plus the classic "123456789" check value. */
static int self_test(uint32_t (*fn)(uint32_t, const void *, size_t)) {
    unsigned char buf[32];
    memset(buf, 0, 32);
    if (fn(0, buf, 32) != 0x8A9136AAu) return 0;
    memset(buf, 0xff, 32);
    if (fn(0, buf, 32) != 0x62A8AB43u) return 0;
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
    if (fn(0, buf, 32) != 0x46DD794Eu) return 0;
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
    if (fn(0, buf, 32) != 0x113FDB5Cu) return 0;
    if (fn(0, "123456789", 9) != 0xE3069283u) return 0;
    return 1;
}

/* The hardware path must agree with the table path on lengths and
 * alignments that reach every branch (both three-way block sizes). */
static int agrees_with_sw(uint32_t (*fn)(uint32_t, const void *, size_t)) {
    size_t n = 3 * LONG_BLOCK + 3 * SHORT_BLOCK + 64;
    unsigned char *buf = (unsigned char *)malloc(n);
    if (!buf) return 0;
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        buf[i] = (unsigned char)x;
    }
    static const size_t lens[] = {0, 1, 7, 8, 9, 3 * SHORT_BLOCK - 1, 3 * SHORT_BLOCK,
                                  3 * SHORT_BLOCK + 13, 3 * LONG_BLOCK, 3 * LONG_BLOCK + 777};
    int ok = 1;
    for (size_t off = 0; off < 3 && ok; off++) {
        for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]) && ok; k++) {
            size_t len = lens[k];
            if (off + len > n) continue;
            ok = fn(0x12345678u, buf + off, len) == pylog_crc32c_extend_sw(0x12345678u, buf + off, len);
        }
    }
    free(buf);
    return ok;
}

void pylog_crc32c_init(void) {
    if (initialised) return;
    build_sw_tables();
    build_shift_table(shift_long, LONG_BLOCK);
    build_shift_table(shift_short, SHORT_BLOCK);
    crc_impl = pylog_crc32c_extend_sw;
    impl_name = "table";
#if HAVE_HW
    if (__builtin_cpu_supports("sse4.2") && !getenv("PYLOG_CRC32C_NO_HW") &&
        self_test(crc32c_hw) && agrees_with_sw(crc32c_hw)) {
        crc_impl = crc32c_hw;
        impl_name = "sse4.2";
    }
#endif
    (void)self_test;
    (void)agrees_with_sw;
    initialised = 1;
}

uint32_t pylog_crc32c_extend(uint32_t crc, const void *buf, size_t len) {
    return crc_impl(crc, buf, len);
}

const char *pylog_crc32c_implementation(void) { return impl_name; }
