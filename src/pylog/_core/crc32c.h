/* CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78).
 *
 * Kafka's record batch v2 checksum (see docs/FORMAT.md, section 2). Unlike
 * LevelDB, pylog never masks the value: the stored CRC is the plain CRC-32C.
 *
 * pylog_crc32c_extend(crc, buf, len) continues a checksum:
 *   extend(extend(0, a), b) == extend(0, a || b).
 * The implementation is chosen once by pylog_crc32c_init(), each candidate
 * only if it reproduces the RFC 3720 test vectors and agrees with the table:
 * carry-less multiply folding on 512-bit vectors when the CPU has VPCLMULQDQ
 * and AVX-512 (F, VL, BW), on 256-bit vectors when it has VPCLMULQDQ and AVX2
 * only, else the SSE4.2 crc32 instruction over three interleaved streams,
 * else a portable slicing-by-8 table. The environment variables
 * PYLOG_CRC32C_NO_VPCLMUL and PYLOG_CRC32C_NO_HW rule out the folding paths
 * or every hardware path. */
#ifndef PYLOG_CRC32C_H
#define PYLOG_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Must be called once before pylog_crc32c_extend (idempotent, not thread-safe). */
void pylog_crc32c_init(void);

uint32_t pylog_crc32c_extend(uint32_t crc, const void *buf, size_t len);

/* The portable implementation, always available (used by tests as an oracle). */
uint32_t pylog_crc32c_extend_sw(uint32_t crc, const void *buf, size_t len);

/* "avx512-vpclmulqdq", "avx2-vpclmulqdq", "sse4.2" or "table": which implementation
 * pylog_crc32c_extend uses. */
const char *pylog_crc32c_implementation(void);

#endif
