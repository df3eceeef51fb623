/* CRC-32C: carry-less multiply folding (VPCLMULQDQ on 512- or 256-bit
 * vectors), the SSE4.2 crc32 instruction, and a table fallback. See crc32c.h.
 *
 * SSE4.2 path.
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
#include <immintrin.h>
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

/* ------------------------------------------------------------------ */
/* Hardware: VPCLMULQDQ folding on 512-bit vectors.                    *
 *
 * CRC is a remainder: crc0(M) = M(x) * x^32 mod P(x). A 16-byte block A that
 * sits D bytes before a block B contributes A(x) * x^(8D) relative to B, and
 * only its remainder mod P matters, so A can be replaced by a small polynomial
 * xored into B ("folded" forward):
 *     A = Ah * x^64 + Al  ->  Ah * (x^(8D+64) mod P) + Al * (x^(8D) mod P),
 * two 64x32-bit carry-less products (degree <= 95) that fit in B's 128 bits.
 * Four 512-bit accumulators hold sixteen such 16-byte lanes: each step folds
 * all of them 256 bytes forward onto the next 256 bytes of input, so the loop
 * has four independent chains of one multiply and one xor each. At the end
 * the lanes are folded onto the last one, the remaining 16-byte blocks are
 * folded in one at a time, and the single 128-bit block V left over satisfies
 * crc0(prefix) = crc0(V), which two crc32 instructions compute; the last
 * 0-15 bytes go through the crc32 instruction too. The starting register is
 * xored into the first four bytes (crc32(c, w) == crc32(0, w ^ c)).
 *
 * Bit order: data are reflected (the first bit of a byte is its lowest bit),
 * so in a 128-bit lane loaded from memory bit j is the coefficient of
 * x^(127-j), the low quadword holds Ah and the high one Al. pclmulqdq treats
 * its operands as plain polynomials; on reflected operands the 127-bit
 * product comes out one position short, i.e. multiplied by an extra x^-1, so
 * each constant carries one x less: x^(8D+63) mod P and x^(8D-1) mod P,
 * stored reflected in the high half of a quadword (bit i <-> x^(63-i)). */

/* Inputs shorter than this take the crc32-instruction path. */
#define FOLD_MIN 64
#ifndef PF_DIST
#define PF_DIST 2048  /* software prefetch distance, bytes; a multiple of 64 */
#endif

static uint32_t xpow_mod(size_t n) {  /* x^n mod P, reflected 32-bit */
    uint32_t r = 0x80000000u;         /* x^0 */
    while (n--) r = (r & 1) ? (r >> 1) ^ POLY : r >> 1;
    return r;
}

/* Per fold distance: {constant for the low quadword, for the high quadword}. */
static uint64_t k_fold256[2], k_fold192[2], k_fold128[2], k_fold96[2], k_fold64[2],
                k_fold48[2], k_fold32[2], k_fold16[2];

static void fold_constants(uint64_t k[2], size_t distance) {
    k[0] = (uint64_t)xpow_mod(8 * distance + 63) << 32;
    k[1] = (uint64_t)xpow_mod(8 * distance - 1) << 32;
}

static void build_fold_constants(void) {
    fold_constants(k_fold256, 256);
    fold_constants(k_fold192, 192);
    fold_constants(k_fold128, 128);
    fold_constants(k_fold96, 96);
    fold_constants(k_fold64, 64);
    fold_constants(k_fold48, 48);
    fold_constants(k_fold32, 32);
    fold_constants(k_fold16, 16);
}

#define VPCLMUL_TARGET \
    __attribute__((target("avx512f,avx512vl,avx512bw,avx2,vpclmulqdq,pclmul,sse4.2")))

VPCLMUL_TARGET static inline __m512i bcast_k(const uint64_t k[2]) {
    return _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k[1], (long long)k[0]));
}

/* x folded forward by the distance of k: the products, not yet xored into the target. */
VPCLMUL_TARGET static inline __m512i fold512(__m512i x, __m512i k, __m512i onto) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), onto, 0x96);
}

VPCLMUL_TARGET static inline __m128i fold128(__m128i x, __m128i k, __m128i onto) {
    return _mm_ternarylogic_epi64(_mm_clmulepi64_si128(x, k, 0x00),
                                  _mm_clmulepi64_si128(x, k, 0x11), onto, 0x96);
}

VPCLMUL_TARGET
static uint32_t crc32c_vpclmul(uint32_t crc, const void *buf, size_t len) {
    const unsigned char *p = (const unsigned char *)buf;
    if (len < FOLD_MIN) return crc32c_hw(crc, buf, len);

    /* Loads that straddle two cache lines cost twice: read whole aligned
     * 64-byte lines. The first one starts z bytes before the data; those bytes
     * are masked to zero, which leaves the CRC unchanged (a zero register stays
     * zero over zero bytes) as long as the starting register is xored into the
     * first four bytes of the data, at offset z (a rotated broadcast, masked).
     * With z > 60 those four bytes would straddle two lines: the crc32
     * instruction takes the 1-3 bytes up to the boundary instead. */
    uint32_t c0 = ~crc;
    size_t z = (uintptr_t)p & 63;
    if (z > 60) {
        for (; z < 64; z++, len--) c0 = _mm_crc32_u8(c0, *p++);
        z = 0;
        if (len < FOLD_MIN) return crc32c_hw(~c0, p, len);
    }
    unsigned rot = 8 * (unsigned)(z & 3);
    uint32_t c_rot = rot ? (c0 << rot) | (c0 >> (32 - rot)) : c0;
    p -= z;
    len += z;
    __m512i x0 = _mm512_xor_si512(
        _mm512_maskz_loadu_epi8(~0ULL << z, p),
        _mm512_maskz_mov_epi8(0xFULL << z, _mm512_set1_epi32((int)c_rot)));
    if (len >= 256) {
        __m512i x1 = _mm512_load_si512(p + 64);
        __m512i x2 = _mm512_load_si512(p + 128);
        __m512i x3 = _mm512_load_si512(p + 192);
        p += 256;
        len -= 256;
        const __m512i k = bcast_k(k_fold256);
        /* From DRAM the hardware prefetcher alone leaves the loop waiting
         * (it stops at every 4 KiB page and starts late after each call's
         * Python overhead): prefetch PF_DIST bytes ahead while that stays
         * inside the buffer, then finish without. */
#define FOLD_STEP(x0, x1, x2, x3, p)                    \
        x0 = fold512(x0, k, _mm512_load_si512(p));       \
        x1 = fold512(x1, k, _mm512_load_si512(p + 64));  \
        x2 = fold512(x2, k, _mm512_load_si512(p + 128)); \
        x3 = fold512(x3, k, _mm512_load_si512(p + 192));
        while (len >= PF_DIST + 256) {
            for (int l = 0; l < 256; l += 64) _mm_prefetch((const char *)(p + PF_DIST + l), _MM_HINT_T0);
            FOLD_STEP(x0, x1, x2, x3, p)
            p += 256;
            len -= 256;
        }
        while (len >= 256) {
            FOLD_STEP(x0, x1, x2, x3, p)
            p += 256;
            len -= 256;
        }
#undef FOLD_STEP
        /* x0, x1, x2 are 192, 128, 64 bytes before x3: fold them all onto it. */
        x3 = fold512(x0, bcast_k(k_fold192), x3);
        x3 = fold512(x1, bcast_k(k_fold128), x3);
        x0 = fold512(x2, bcast_k(k_fold64), x3);
    } else {
        p += 64;
        len -= 64;
    }
    const __m512i k64 = bcast_k(k_fold64);
    while (len >= 64) {
        x0 = fold512(x0, k64, _mm512_load_si512(p));
        p += 64;
        len -= 64;
    }
    /* Lanes 0, 1, 2 are 48, 32, 16 bytes before lane 3: one multiply with a
     * per-lane constant (zero for lane 3), then xor the four lanes together. */
    const __m512i kl = _mm512_set_epi64(0, 0, (long long)k_fold16[1], (long long)k_fold16[0],
                                        (long long)k_fold32[1], (long long)k_fold32[0],
                                        (long long)k_fold48[1], (long long)k_fold48[0]);
    __m512i t = _mm512_xor_si512(_mm512_clmulepi64_epi128(x0, kl, 0x00),
                                 _mm512_clmulepi64_epi128(x0, kl, 0x11));
    __m256i t2 = _mm256_xor_si256(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
    __m128i v = _mm_ternarylogic_epi64(_mm256_castsi256_si128(t2), _mm256_extracti128_si256(t2, 1),
                                       _mm512_extracti32x4_epi32(x0, 3), 0x96);
    const __m128i k16 = _mm_set_epi64x((long long)k_fold16[1], (long long)k_fold16[0]);
    while (len >= 16) {
        v = fold128(v, k16, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(v));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(v, 1));
    if (len >= 8) {
        c = _mm_crc32_u64(c, load64(p));
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    if (len >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        c32 = _mm_crc32_u32(c32, w);
        p += 4;
        len -= 4;
    }
    while (len--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#define HAVE_VPCLMUL 1

/* ------------------------------------------------------------------ */
/* Hardware: VPCLMULQDQ folding on 256-bit vectors (AVX2, no AVX-512:  *
 * many AMD Zen and Intel client cores, and this project's VM).         *
 *
 * The same folding as above with half-width vectors: four 256-bit
 * accumulators hold eight 16-byte lanes, and each step folds them 128 bytes
 * forward onto the next 128 bytes of input (four independent chains of two
 * multiplies and two xors; AVX2 has no three-way xor). Loads are unaligned
 * (no masked loads without AVX-512): the starting register is xored into the
 * first four bytes of the data. Below FOLD256_MIN bytes the crc32
 * instruction's three chains are as fast. */
#define FOLD256_MIN 256
#define VPCLMUL256_TARGET __attribute__((target("avx2,vpclmulqdq,pclmul,sse4.2")))

VPCLMUL256_TARGET static inline __m256i bcast256_k(const uint64_t k[2]) {
    return _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)k[1], (long long)k[0]));
}

VPCLMUL256_TARGET static inline __m256i fold256(__m256i x, __m256i k, __m256i onto) {
    return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00),
                                             _mm256_clmulepi64_epi128(x, k, 0x11)), onto);
}

VPCLMUL256_TARGET static inline __m128i fold128_avx2(__m128i x, __m128i k, __m128i onto) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                       _mm_clmulepi64_si128(x, k, 0x11)), onto);
}

#define LOAD256(q) _mm256_loadu_si256((const __m256i *)(q))

VPCLMUL256_TARGET
static uint32_t crc32c_vpclmul256(uint32_t crc, const void *buf, size_t len) {
    const unsigned char *p = (const unsigned char *)buf;
    if (len < FOLD256_MIN) return crc32c_hw(crc, buf, len);
    __m256i x0 = _mm256_xor_si256(LOAD256(p), _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, (int)~crc));
    __m256i x1 = LOAD256(p + 32);
    __m256i x2 = LOAD256(p + 64);
    __m256i x3 = LOAD256(p + 96);
    p += 128;
    len -= 128;
    const __m256i k = bcast256_k(k_fold128);
    while (len >= 128) {
        x0 = fold256(x0, k, LOAD256(p));
        x1 = fold256(x1, k, LOAD256(p + 32));
        x2 = fold256(x2, k, LOAD256(p + 64));
        x3 = fold256(x3, k, LOAD256(p + 96));
        p += 128;
        len -= 128;
    }
    /* x0, x1, x2 are 96, 64, 32 bytes before x3: fold them all onto it. */
    x3 = fold256(x0, bcast256_k(k_fold96), x3);
    x3 = fold256(x1, bcast256_k(k_fold64), x3);
    x3 = fold256(x2, bcast256_k(k_fold32), x3);
    const __m256i k32 = bcast256_k(k_fold32);
    while (len >= 32) {
        x3 = fold256(x3, k32, LOAD256(p));
        p += 32;
        len -= 32;
    }
    /* The low lane is 16 bytes before the high one. */
    const __m128i k16 = _mm_set_epi64x((long long)k_fold16[1], (long long)k_fold16[0]);
    __m128i v = fold128_avx2(_mm256_castsi256_si128(x3), k16, _mm256_extracti128_si256(x3, 1));
    if (len >= 16) {
        v = fold128_avx2(v, k16, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(v));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(v, 1));
    if (len >= 8) {
        c = _mm_crc32_u64(c, load64(p));
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#undef LOAD256
#else
#define HAVE_HW 0
#define HAVE_VPCLMUL 0
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

/* A hardware path must agree with the table path on lengths and alignments
 * that reach every branch (both three-way block sizes; every folding loop and
 * tail; data starting on, just after and just before a 64-byte boundary). */
static int agrees_with_sw(uint32_t (*fn)(uint32_t, const void *, size_t)) {
    size_t n = 3 * LONG_BLOCK + 3 * SHORT_BLOCK + 64;
    unsigned char *mem = (unsigned char *)malloc(n + 64);
    if (!mem) return 0;
    unsigned char *buf = mem + ((64 - ((uintptr_t)mem & 63)) & 63);
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        buf[i] = (unsigned char)x;
    }
    static const size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 63, 64, 65, 66, 67, 79, 80,
                                  127, 128, 255, 256, 257, 319, 320, 511, 512, 527,
                                  3 * SHORT_BLOCK - 1, 3 * SHORT_BLOCK, 3 * SHORT_BLOCK + 13,
                                  4096, 16384 + 3, 3 * LONG_BLOCK, 3 * LONG_BLOCK + 777};
    static const size_t offs[] = {0, 1, 3, 60, 61, 63};
    int ok = 1;
    for (size_t o = 0; o < sizeof(offs) / sizeof(offs[0]) && ok; o++) {
        size_t off = offs[o];
        for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]) && ok; k++) {
            size_t len = lens[k];
            if (off + len > n) continue;
            ok = fn(0x12345678u, buf + off, len) == pylog_crc32c_extend_sw(0x12345678u, buf + off, len);
        }
    }
    free(mem);
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
#if HAVE_VPCLMUL
    build_fold_constants();
    if (crc_impl == crc32c_hw && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul") &&
        !getenv("PYLOG_CRC32C_NO_VPCLMUL") &&
        self_test(crc32c_vpclmul) && agrees_with_sw(crc32c_vpclmul)) {
        crc_impl = crc32c_vpclmul;
        impl_name = "avx512-vpclmulqdq";
    }
    if (crc_impl == crc32c_hw && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul") &&
        !getenv("PYLOG_CRC32C_NO_VPCLMUL") &&
        self_test(crc32c_vpclmul256) && agrees_with_sw(crc32c_vpclmul256)) {
        crc_impl = crc32c_vpclmul256;
        impl_name = "avx2-vpclmulqdq";
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
