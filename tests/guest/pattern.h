/*
 * The block pattern of tools/make-pattern-image: every 512-byte block starts with
 * {"MVMPATRN", seed (LE u32), lba (LE u64)} and continues with a fill derived from seed and lba, so
 * a test can check any block of an image it never saw (docs/test-guest.md, "virtio-scsi").
 * Block numbers are always in 512-byte units, also on 2048-byte CD sectors.
 */
#ifndef TESTS_GUEST_PATTERN_H_
#define TESTS_GUEST_PATTERN_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PATTERN_BLOCK 512
#define PATTERN_HEADER 20

/* The per-seed part of the fill, computed once (62 splitmix64 words). */
struct pattern_key {
  uint32_t seed;
  uint8_t stream[PATTERN_BLOCK - PATTERN_HEADER];
};

void pattern_key_init(struct pattern_key *key, uint32_t seed);
/* Writes `count` consecutive 512-byte blocks starting at block number `lba`. */
void pattern_fill(const struct pattern_key *key, void *buf, uint64_t lba, uint64_t count);
/* Checks `count` blocks; on the first mismatch writes a description to `why` and returns false. */
bool pattern_check(const struct pattern_key *key, const void *buf, uint64_t lba, uint64_t count,
                   char *why, size_t why_size);

#endif /* TESTS_GUEST_PATTERN_H_ */
