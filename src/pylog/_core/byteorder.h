/* Big-endian loads and stores: every fixed-width integer in Kafka's formats
 * is big-endian (docs/FORMAT.md, section 1). Unaligned access is allowed;
 * memcpy compiles to a single load or store. */
#ifndef PYLOG_BYTEORDER_H
#define PYLOG_BYTEORDER_H

#include <stdint.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || \
    (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__ && __BYTE_ORDER__ != __ORDER_BIG_ENDIAN__)
#error Cannot determine platform byte order.
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PYLOG_BE16(x) __builtin_bswap16(x)
#define PYLOG_BE32(x) __builtin_bswap32(x)
#define PYLOG_BE64(x) __builtin_bswap64(x)
#else
#define PYLOG_BE16(x) (x)
#define PYLOG_BE32(x) (x)
#define PYLOG_BE64(x) (x)
#endif

static inline uint16_t pylog_load_u16(const void *p) { uint16_t v; memcpy(&v, p, 2); return PYLOG_BE16(v); }
static inline uint32_t pylog_load_u32(const void *p) { uint32_t v; memcpy(&v, p, 4); return PYLOG_BE32(v); }
static inline uint64_t pylog_load_u64(const void *p) { uint64_t v; memcpy(&v, p, 8); return PYLOG_BE64(v); }
static inline int16_t pylog_load_i16(const void *p) { return (int16_t)pylog_load_u16(p); }
static inline int32_t pylog_load_i32(const void *p) { return (int32_t)pylog_load_u32(p); }
static inline int64_t pylog_load_i64(const void *p) { return (int64_t)pylog_load_u64(p); }

static inline void pylog_store_u16(void *p, uint16_t v) { v = PYLOG_BE16(v); memcpy(p, &v, 2); }
static inline void pylog_store_u32(void *p, uint32_t v) { v = PYLOG_BE32(v); memcpy(p, &v, 4); }
static inline void pylog_store_u64(void *p, uint64_t v) { v = PYLOG_BE64(v); memcpy(p, &v, 8); }
static inline void pylog_store_i16(void *p, int16_t v) { pylog_store_u16(p, (uint16_t)v); }
static inline void pylog_store_i32(void *p, int32_t v) { pylog_store_u32(p, (uint32_t)v); }
static inline void pylog_store_i64(void *p, int64_t v) { pylog_store_u64(p, (uint64_t)v); }

#endif
