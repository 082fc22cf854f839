// Runs the CDB fuzz target over seed inputs (the commands of docs/linux-commands.md, plus
// malformed ones) and a fixed number of deterministic mutations of them: a smoke test that the
// target builds and runs as plain C++. The libFuzzer build links cdb_fuzzer.cc on its own.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

struct Seed {
  std::vector<uint8_t> cdb;
  uint16_t data_in;
  uint16_t data_out;
};

const std::vector<Seed>& Seeds() {
  static const std::vector<Seed> seeds = {
      {{0x00, 0, 0, 0, 0, 0}, 0, 0},
      {{0x12, 0, 0, 0, 0x24, 0}, 36, 0},
      {{0x12, 1, 0x00, 0, 0x09, 0}, 9, 0},
      {{0x12, 1, 0x83, 0, 0x0a, 0}, 10, 0},
      {{0x12, 1, 0xb0, 0, 0x40, 0}, 64, 0},
      {{0x12, 1, 0xb2, 0, 0x08, 0}, 8, 0},
      {{0xa0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 4096, 0},
      {{0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0}, 32, 0},
      {{0x1a, 0, 0x3f, 0, 0x04, 0}, 4, 0},
      {{0x1a, 0, 0x08, 0, 0x20, 0}, 32, 0},
      {{0xa3, 0x0c, 0x01, 0x12, 0, 0, 0, 0, 0, 0x0a, 0, 0}, 10, 0},
      {{0xa3, 0x0c, 0x00, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 4096, 0},
      {{0x28, 0, 0, 0, 0, 0, 0, 0, 0x08, 0}, 4096, 0},
      {{0x2a, 0x08, 0, 0, 0x08, 0x02, 0, 0, 0x02, 0}, 0, 1024},
      {{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0},
      {{0x41, 0, 0, 0, 0x00, 0x2a, 0, 0, 0x18, 0}, 0, 512},
      {{0x42, 0, 0, 0, 0, 0, 0, 0, 0x18, 0}, 0, 24},
      {{0x15, 0x10, 0, 0, 0x18, 0}, 0, 24},
      {{0x55, 0x10, 0, 0, 0, 0, 0, 0, 0x20, 0}, 0, 32},
      {{0x1a, 0, 0x2a, 0, 0x80, 0}, 128, 0},
      {{0x5a, 0, 0x2a, 0, 0, 0, 0, 0, 0x80, 0, 0, 0}, 128, 0},
      {{0x46, 0, 0, 0x28, 0, 0, 0, 0, 0x10, 0}, 16, 0},
      {{0x46, 0, 0, 0, 0, 0, 0, 0, 0x20, 0}, 32, 0},
      {{0x43, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0x40}, 12, 0},
      {{0x43, 0x02, 0, 0, 0, 0, 0xaa, 0, 0x0c, 0}, 12, 0},
      {{0x43, 0x02, 0x02, 0, 0, 0, 0x01, 0, 0xff, 0}, 255, 0},
      {{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8, 0},
      {{0x51, 0, 0, 0, 0, 0, 0, 0, 0x22, 0}, 34, 0},
      {{0x52, 0x01, 0, 0, 0, 0x01, 0, 0, 0x08, 0}, 8, 0},
      {{0x4a, 0x01, 0, 0, 0x10, 0, 0, 0, 0x08, 0}, 8, 0},
      {{0x1e, 0, 0, 0, 0x01, 0}, 0, 0},
      {{0x1b, 0, 0, 0, 0x02, 0}, 0, 0},
      {{0x1b, 0, 0, 0, 0x03, 0}, 0, 0},
      {{0xbd, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0, 0}, 8, 0},
      {{0xbe, 0, 0, 0, 0, 0x10, 0, 0, 0x01, 0x10, 0, 0}, 2048, 0},
      {{0x42, 0x02, 0x40, 0x01, 0, 0, 0, 0, 0x10, 0}, 16, 0},
      {{0x03, 0, 0, 0, 0x60, 0}, 96, 0},
      {{0xa8, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0, 0}, 8192, 0},
      {{0x88, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0}, 8192, 0},
      {{0x93, 0x09, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x40, 0, 0}, 0, 0},
      {{0x28}, 512, 0},
      {{}, 0, 0},
      {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 255, 255},
  };
  return seeds;
}

std::vector<uint8_t> Input(const Seed& seed, uint8_t selector) {
  std::vector<uint8_t> input = {selector,
                                static_cast<uint8_t>(seed.cdb.size()),
                                static_cast<uint8_t>((seed.data_in / 4) >> 8),
                                static_cast<uint8_t>(seed.data_in / 4),
                                static_cast<uint8_t>((seed.data_out / 4) >> 8),
                                static_cast<uint8_t>(seed.data_out / 4)};
  input.insert(input.end(), seed.cdb.begin(), seed.cdb.end());
  for (uint16_t i = 0; i < seed.data_out; ++i) input.push_back(static_cast<uint8_t>(i * 13));
  input.push_back(0);
  return input;
}

}  // namespace

int main() {
  size_t runs = 0;
  // Every seed on every path.
  for (const Seed& seed : Seeds()) {
    for (int selector = 0; selector < 256; selector += 1) {
      const std::vector<uint8_t> input = Input(seed, static_cast<uint8_t>(selector));
      LLVMFuzzerTestOneInput(input.data(), input.size());
      ++runs;
    }
  }
  // Deterministic mutations (xorshift): flip bytes of seeds.
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&state]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int i = 0; i < 20000; ++i) {
    const Seed& seed = Seeds()[next() % Seeds().size()];
    std::vector<uint8_t> input = Input(seed, static_cast<uint8_t>(next()));
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) {
      input[next() % input.size()] = static_cast<uint8_t>(next());
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
    ++runs;
  }
  std::printf("cdb_fuzzer smoke: %zu inputs, no invariant violated\n", runs);
  return 0;
}
