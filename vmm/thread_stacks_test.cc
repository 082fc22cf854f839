#include "vmm/thread_stacks.h"

#include <pthread.h>

#include <cstddef>
#include <thread>

#include "gtest/gtest.h"

namespace vmm {
namespace {

size_t CurrentThreadStackSize() {
  pthread_attr_t attributes;
  if (pthread_getattr_np(pthread_self(), &attributes) != 0) return 0;
  size_t size = 0;
  pthread_attr_getstacksize(&attributes, &size);
  pthread_attr_destroy(&attributes);
  return size;
}

TEST(ThreadStacksTest, StdThreadsGetTheSmallStack) {
  ASSERT_TRUE(UseSmallThreadStacks().ok());
  size_t size = 0;
  std::thread([&size] { size = CurrentThreadStackSize(); }).join();
  EXPECT_EQ(size, kThreadStackBytes);
  EXPECT_LT(size, size_t{2} << 20);  // below a huge page: none can back it
}

}  // namespace
}  // namespace vmm
