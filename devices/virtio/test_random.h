#ifndef DEVICES_VIRTIO_TEST_RANDOM_H_
#define DEVICES_VIRTIO_TEST_RANDOM_H_

#include <cstdint>

namespace devices::virtio::testing {

// Marsaglia's xorshift64: deterministic pseudo-random inputs for the fuzzers' smoke tests (the
// same sequence on every run, so a failure reproduces). `state` must not be 0.
inline uint64_t XorShift64(uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

}  // namespace devices::virtio::testing

#endif  // DEVICES_VIRTIO_TEST_RANDOM_H_
