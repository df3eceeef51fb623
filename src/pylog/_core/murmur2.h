/* Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2): the hash the
 * Java producer's default partitioner applies to serialized keys. Same seed
 * and constants, same little-endian 4-byte blocks, same tail handling, so a
 * key lands on the same partition as with Kafka's own clients:
 *     partition = (murmur2(key) & 0x7fffffff) % num_partitions */
#ifndef PYLOG_MURMUR2_H
#define PYLOG_MURMUR2_H

#include <stddef.h>
#include <stdint.h>

static inline int32_t pylog_murmur2(const void *data, size_t len) {
    const uint8_t *p = data;
    const uint32_t m = 0x5bd1e995u;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)len;
    size_t blocks = len / 4;
    for (size_t i = 0; i < blocks; i++) {
        const uint8_t *b = p + 4 * i;
        uint32_t k = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = p + (len & ~(size_t)3);
    switch (len & 3) {
    case 3: h ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1: h ^= tail[0];
            h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

/* Kafka's Utils.toPositive(murmur2(key)) % n. */
static inline int32_t pylog_key_partition(const void *key, size_t len, int32_t num_partitions) {
    return (int32_t)(((uint32_t)pylog_murmur2(key, len) & 0x7fffffffu) % (uint32_t)num_partitions);
}

#endif
