#ifndef DEVICES_VIRTIO_TEST_RANDOM_H_
#define DEVICES_VIRTIO_TEST_RANDOM_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace devices::virtio::testing {

// Marsaglia's xorshift64: deterministic pseudo-random inputs for the fuzzers' smoke tests (the
// same sequence on every run, so a failure reproduces). `state` must not be 0.
inline uint64_t XorShift64(uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

// A fuzzer's input read as operands: little-endian integers of 1 to 8 bytes, zeros past the end.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return position_ >= size_; }
  uint64_t Take(size_t bytes) {
    uint64_t value = 0;
    for (size_t i = 0; i < bytes; ++i) {
      const uint8_t byte = position_ < size_ ? data_[position_] : 0;
      ++position_;
      value |= uint64_t{byte} << (8 * i);
    }
    return value;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
};

// A fuzzer's smoke run without libFuzzer: `one_input` (its LLVMFuzzerTestOneInput) on every seed,
// then on `random_inputs` pseudo-random inputs of 16 to 527 bytes from `state`; prints
// "NAME: N inputs, no failure" (a failure aborts inside `one_input`). Returns main()'s status.
inline int RunFuzzSmoke(const char* name, const std::vector<std::vector<uint8_t>>& seeds,
                        uint64_t state, int random_inputs,
                        int (*one_input)(const uint8_t* data, size_t size)) {
  int runs = 0;
  for (const std::vector<uint8_t>& seed : seeds) {
    one_input(seed.data(), seed.size());
    ++runs;
  }
  for (int i = 0; i < random_inputs; ++i) {
    std::vector<uint8_t> input(16 + XorShift64(state) % 512);
    for (uint8_t& byte : input) byte = static_cast<uint8_t>(XorShift64(state));
    one_input(input.data(), input.size());
    ++runs;
  }
  std::printf("%s: %d inputs, no failure\n", name, runs);
  return 0;
}

}  // namespace devices::virtio::testing

#endif  // DEVICES_VIRTIO_TEST_RANDOM_H_
