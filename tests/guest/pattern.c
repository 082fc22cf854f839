/* The block pattern of tools/make-pattern-image (see pattern.h and the script's header). */
#include "tests/guest/pattern.h"

#include "tests/guest/guest.h"

static const char pattern_magic[8] = {'M', 'V', 'M', 'P', 'A', 'T', 'R', 'N'};

/* The splitmix64 finaliser. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void pattern_key_init(struct pattern_key *key, uint32_t seed) {
  key->seed = seed;
  for (unsigned i = 0; i < sizeof(key->stream); i++) {
    uint64_t word = mix64(((uint64_t)seed << 32) | (i / 8));
    key->stream[i] = (uint8_t)(word >> (8 * (i % 8)));
  }
}

static void put_le(uint8_t *p, uint64_t v, unsigned n) {
  for (unsigned i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void fill_one(const struct pattern_key *key, uint8_t *b, uint64_t lba) {
  memcpy(b, pattern_magic, 8);
  put_le(b + 8, key->seed, 4);
  put_le(b + 12, lba, 8);
  uint8_t w[8];
  put_le(w, mix64(lba * 0x9e3779b97f4a7c15ull + key->seed), 8);
  for (unsigned i = 0; i < sizeof(key->stream); i++) {
    b[PATTERN_HEADER + i] = key->stream[i] ^ w[i % 8];
  }
}

void pattern_fill(const struct pattern_key *key, void *buf, uint64_t lba, uint64_t count) {
  uint8_t *b = buf;
  for (uint64_t i = 0; i < count; i++) fill_one(key, b + i * PATTERN_BLOCK, lba + i);
}

bool pattern_check(const struct pattern_key *key, const void *buf, uint64_t lba, uint64_t count,
                   char *why, size_t why_size) {
  const uint8_t *b = buf;
  uint8_t expected[PATTERN_BLOCK];
  for (uint64_t i = 0; i < count; i++, b += PATTERN_BLOCK) {
    fill_one(key, expected, lba + i);
    if (memcmp(b, expected, PATTERN_BLOCK) == 0) continue;
    if (memcmp(b, pattern_magic, 8) != 0) {
      snprintf(why, why_size,
               "block %lu: no pattern header (first bytes %02x %02x %02x %02x %02x %02x %02x %02x)",
               lba + i, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]);
    } else if (get_le(b + 8, 4) != key->seed || get_le(b + 12, 8) != lba + i) {
      snprintf(why, why_size, "block %lu: header says seed %lu block %lu, expected seed %u",
               lba + i, get_le(b + 8, 4), get_le(b + 12, 8), key->seed);
    } else {
      unsigned at = 0;
      while (at < PATTERN_BLOCK && b[at] == expected[at]) at++;
      snprintf(why, why_size,
               "block %lu (seed %u): fill differs at byte %u (0x%02x, expected 0x%02x)", lba + i,
               key->seed, at, b[at], expected[at]);
    }
    return false;
  }
  return true;
}
