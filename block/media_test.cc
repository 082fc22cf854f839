#include "block/media.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "block/memory_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace block {
namespace {

using ::testing::HasSubstr;

struct Seen {
  MediaEventType type;
  bool by_guest;
  bool present;
  bool tray_open;
  bool locked;
  uint64_t generation;
};

class RecordingListener : public MediaListener {
 public:
  explicit RecordingListener(std::vector<std::pair<int, Seen>>* log = nullptr, int id = 0)
      : log_(log), id_(id) {}
  void OnMediaEvent(const MediaEvent& event) override {
    const Seen seen{event.type,           event.by_guest,
                    event.state->present, event.state->tray_open,
                    event.state->locked,  event.state->generation};
    events.push_back(seen);
    if (log_ != nullptr) log_->push_back({id_, seen});
  }
  std::vector<MediaEventType> types() const {
    std::vector<MediaEventType> out;
    for (const Seen& seen : events) out.push_back(seen.type);
    return out;
  }
  std::vector<Seen> events;

 private:
  std::vector<std::pair<int, Seen>>* log_;
  int id_;
};

std::shared_ptr<BlockBackend> Disc(uint64_t size = 2048 * 16) {
  return std::make_shared<MemoryBackend>(
      MemoryBackendOptions{.size_bytes = size, .logical_block_size = 2048, .read_only = true});
}

using T = MediaEventType;

TEST(RemovableMediaTest, EmptyDrive) {
  RemovableMedia media;
  auto state = media.Current();
  EXPECT_FALSE(state->present);
  EXPECT_FALSE(state->tray_open);
  EXPECT_FALSE(state->ready());
  EXPECT_EQ(state->generation, 0u);
  EXPECT_EQ(state->size_bytes(), 0u);
  EXPECT_EQ(state->backend, nullptr);
}

TEST(RemovableMediaTest, InitialMediumIsReady) {
  RemovableMedia media(Disc(4096), "/isos/a.iso");
  auto state = media.Current();
  EXPECT_TRUE(state->ready());
  EXPECT_EQ(state->source, "/isos/a.iso");
  EXPECT_EQ(state->size_bytes(), 4096u);
}

TEST(RemovableMediaTest, InsertAndEjectStepByStepAndBumpGenerations) {
  RemovableMedia media;
  RecordingListener listener;
  media.AddListener(&listener);

  ASSERT_TRUE(media.Insert(Disc(), "a.iso").ok());
  EXPECT_EQ(listener.types(), (std::vector<T>{T::kTrayOpened, T::kInserted, T::kTrayClosed}));
  EXPECT_EQ(listener.events[0].generation, 0u);
  EXPECT_TRUE(listener.events[1].present);
  EXPECT_TRUE(listener.events[1].tray_open);  // in the tray, not yet reachable
  EXPECT_EQ(listener.events[1].generation, 1u);
  EXPECT_FALSE(listener.events[2].tray_open);
  EXPECT_TRUE(media.Current()->ready());
  EXPECT_EQ(media.Current()->generation, 1u);
  EXPECT_EQ(media.Current()->source, "a.iso");

  EXPECT_EQ(media.Insert(Disc(), "b.iso").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(media.Insert(nullptr, "c.iso").code(), absl::StatusCode::kInvalidArgument);

  listener.events.clear();
  ASSERT_TRUE(media.Eject(/*force=*/false).ok());
  EXPECT_EQ(listener.types(), (std::vector<T>{T::kTrayOpened, T::kRemoved}));
  auto state = media.Current();
  EXPECT_FALSE(state->present);
  EXPECT_TRUE(state->tray_open);
  EXPECT_EQ(state->backend, nullptr);
  EXPECT_EQ(state->source, "");
  EXPECT_EQ(state->generation, 2u);

  // Ejecting an empty open drive changes nothing.
  listener.events.clear();
  ASSERT_TRUE(media.Eject(false).ok());
  EXPECT_TRUE(listener.events.empty());
  EXPECT_EQ(media.Current()->generation, 2u);

  // Inserting into the open tray does not open it again.
  ASSERT_TRUE(media.Insert(Disc(), "b.iso").ok());
  EXPECT_EQ(listener.types(), (std::vector<T>{T::kInserted, T::kTrayClosed}));
  EXPECT_EQ(media.Current()->generation, 3u);
  for (const Seen& seen : listener.events) EXPECT_FALSE(seen.by_guest);
}

TEST(RemovableMediaTest, TrayAndLockChangesKeepTheGeneration) {
  RemovableMedia media(Disc(), "a.iso");
  RecordingListener listener;
  media.AddListener(&listener);
  ASSERT_TRUE(media.SetTrayOpen(true, false).ok());
  EXPECT_TRUE(media.Current()->present);
  EXPECT_FALSE(media.Current()->ready());
  ASSERT_TRUE(media.SetTrayOpen(true, false).ok());  // no change, no event
  ASSERT_TRUE(media.SetTrayOpen(false, false).ok());
  EXPECT_TRUE(media.Current()->ready());
  media.SetLocked(true, /*by_guest=*/true);
  media.SetLocked(true, true);  // repeated: no event
  media.SetLocked(false, true);
  EXPECT_EQ(listener.types(),
            (std::vector<T>{T::kTrayOpened, T::kTrayClosed, T::kLockChanged, T::kLockChanged}));
  EXPECT_TRUE(listener.events[2].locked);
  EXPECT_TRUE(listener.events[2].by_guest);
  EXPECT_FALSE(listener.events[3].locked);
  for (const Seen& seen : listener.events) EXPECT_EQ(seen.generation, 0u);
}

TEST(RemovableMediaTest, LockRefusesRemovalUnlessForced) {
  RemovableMedia media(Disc(), "a.iso");
  RecordingListener listener;
  media.AddListener(&listener);
  media.SetLocked(true, true);
  listener.events.clear();

  // Refused, and the guest is asked to let go (a request not by the guest: the drive reports it as
  // an MMC EjectRequest), with nothing changed.
  const absl::Status refused = media.Eject(false);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("it was asked to eject the medium"));
  EXPECT_EQ(media.SetTrayOpen(true, false).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(listener.types(), (std::vector<T>{T::kEjectRequested, T::kEjectRequested}));
  for (const Seen& seen : listener.events) EXPECT_FALSE(seen.by_guest);
  EXPECT_TRUE(media.Current()->ready());
  EXPECT_EQ(media.Current()->generation, 0u);
  listener.events.clear();

  // Forced: the tray opens although locked; closing is always allowed; the lock stays the guest's.
  ASSERT_TRUE(media.SetTrayOpen(true, /*force=*/true).ok());
  ASSERT_TRUE(media.SetTrayOpen(false, false).ok());
  ASSERT_TRUE(media.Eject(/*force=*/true).ok());
  EXPECT_EQ(listener.types(),
            (std::vector<T>{T::kTrayOpened, T::kTrayClosed, T::kTrayOpened, T::kRemoved}));
  EXPECT_FALSE(media.Current()->present);
  EXPECT_TRUE(media.Current()->locked);
  EXPECT_EQ(media.Current()->generation, 1u);

  // Nothing to protect in an empty drive: an insertion goes ahead.
  ASSERT_TRUE(media.Insert(Disc(), "b.iso").ok());
  EXPECT_TRUE(media.Current()->ready());
}

// A guest that ejected (udev answering an eject request) and then locked again with the tray
// open, as Linux's sr does on every open: the medium still comes out of the open tray.
TEST(RemovableMediaTest, EjectTakesTheMediumOutOfAnOpenTrayTheGuestLocked) {
  RemovableMedia media(Disc(), "a.iso");
  RecordingListener listener;
  media.AddListener(&listener);
  ASSERT_TRUE(media.GuestLoadEject(/*eject=*/true).ok());
  media.SetLocked(true, /*by_guest=*/true);
  listener.events.clear();
  ASSERT_TRUE(media.Eject(/*force=*/false).ok());
  EXPECT_EQ(listener.types(), (std::vector<T>{T::kRemoved}));
  EXPECT_FALSE(media.Current()->present);
  EXPECT_TRUE(media.Current()->tray_open);
  EXPECT_TRUE(media.Current()->locked);
  // Still locked: the tray does not close and open again on the host's say.
  ASSERT_TRUE(media.SetTrayOpen(false, false).ok());
  EXPECT_EQ(media.SetTrayOpen(true, false).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RemovableMediaTest, GuestLoadEject) {
  RemovableMedia media(Disc(), "a.iso");
  RecordingListener listener;
  media.AddListener(&listener);

  // Eject opens the tray and leaves the medium in it; load brings the same medium back.
  ASSERT_TRUE(media.GuestLoadEject(/*eject=*/true).ok());
  EXPECT_TRUE(media.Current()->present);
  EXPECT_TRUE(media.Current()->tray_open);
  ASSERT_TRUE(media.GuestLoadEject(true).ok());  // already open
  ASSERT_TRUE(media.GuestLoadEject(false).ok());
  EXPECT_TRUE(media.Current()->ready());
  EXPECT_EQ(media.Current()->generation, 0u);
  EXPECT_EQ(listener.types(), (std::vector<T>{T::kTrayOpened, T::kTrayClosed}));
  EXPECT_TRUE(listener.events[0].by_guest);
  EXPECT_TRUE(listener.events[1].by_guest);

  // Locked: refused, then reported to the listeners as a request, with the state unchanged.
  media.SetLocked(true, true);
  listener.events.clear();
  EXPECT_EQ(media.GuestLoadEject(true).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(listener.events.size(), 1u);
  EXPECT_EQ(listener.events[0].type, T::kEjectRequested);
  EXPECT_TRUE(listener.events[0].by_guest);
  EXPECT_FALSE(listener.events[0].tray_open);
  EXPECT_TRUE(media.Current()->ready());

  // A load is never refused (forced open by the API while locked, then the guest loads).
  ASSERT_TRUE(media.SetTrayOpen(true, true).ok());
  ASSERT_TRUE(media.GuestLoadEject(false).ok());
  EXPECT_TRUE(media.Current()->ready());
}

TEST(RemovableMediaTest, ListenersInOrderAndRemoved) {
  RemovableMedia media;
  std::vector<std::pair<int, Seen>> log;
  RecordingListener first(&log, 1), second(&log, 2);
  media.AddListener(&first);
  media.AddListener(&second);
  media.AddListener(&first);  // once only
  ASSERT_TRUE(media.SetTrayOpen(true, false).ok());
  media.SetLocked(true, false);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0].first, 1);
  EXPECT_EQ(log[0].second.type, T::kTrayOpened);
  EXPECT_EQ(log[1].first, 2);
  EXPECT_EQ(log[1].second.type, T::kTrayOpened);
  EXPECT_EQ(log[2].first, 1);
  EXPECT_EQ(log[2].second.type, T::kLockChanged);
  EXPECT_EQ(log[3].first, 2);
  media.RemoveListener(&first);
  media.SetLocked(false, false);
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[4].first, 2);
}

// A listener sees the state it is told about as already current: publish, then notify.
TEST(RemovableMediaTest, SnapshotIsPublishedBeforeListenersRun) {
  RemovableMedia media;
  struct Checker : MediaListener {
    RemovableMedia* media;
    int checked = 0;
    void OnMediaEvent(const MediaEvent& event) override {
      EXPECT_EQ(media->Current(), event.state);
      ++checked;
    }
  } checker;
  checker.media = &media;
  media.AddListener(&checker);
  ASSERT_TRUE(media.Insert(Disc(), "a.iso").ok());
  ASSERT_TRUE(media.Eject(false).ok());
  EXPECT_EQ(checker.checked, 5);
}

// Readers see only whole snapshots while a writer swaps media: each generation's medium is the one
// inserted for it (odd generations have a medium, even ones none). Run under TSAN to check the
// synchronization itself.
TEST(RemovableMediaTest, ConcurrentReadersSeeConsistentSnapshots) {
  RemovableMedia media;
  constexpr int kSwaps = 2000;
  std::vector<std::shared_ptr<BlockBackend>> discs;
  for (int i = 0; i < kSwaps; ++i) discs.push_back(Disc(2048 * (i + 1)));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      uint64_t last_generation = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const std::shared_ptr<const MediaState> state = media.Current();
        ASSERT_GE(state->generation, last_generation);  // never goes back
        last_generation = state->generation;
        if (state->generation % 2 == 1) {
          ASSERT_TRUE(state->present);
          const uint64_t index = state->generation / 2;
          ASSERT_EQ(state->backend, discs[index]);
          ASSERT_EQ(state->size_bytes(), 2048 * (index + 1));
          ASSERT_EQ(state->source, std::to_string(index));
        } else {
          ASSERT_FALSE(state->present);
          ASSERT_EQ(state->backend, nullptr);
          ASSERT_FALSE(state->ready());
        }
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (int i = 0; i < kSwaps; ++i) {
    ASSERT_TRUE(media.Insert(discs[i], std::to_string(i)).ok());
    ASSERT_TRUE(media.Eject(false).ok());
  }
  stop = true;
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(media.Current()->generation, 2u * kSwaps);
  EXPECT_GT(reads.load(), 0u);
}

// Changes from several threads are serialized: every change lands, each listener sees them in the
// order they were published.
TEST(RemovableMediaTest, ConcurrentChangesAreSerialized) {
  RemovableMedia media(Disc(), "a.iso");
  RecordingListener listener;
  media.AddListener(&listener);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&media] {
      for (int i = 0; i < 500; ++i) {
        media.SetLocked(true, true);
        media.SetLocked(false, true);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // Each event is a change relative to the one before it.
  bool locked = false;
  for (const Seen& seen : listener.events) {
    ASSERT_EQ(seen.type, T::kLockChanged);
    ASSERT_NE(seen.locked, locked);
    locked = seen.locked;
  }
  EXPECT_FALSE(media.Current()->locked);
}

}  // namespace
}  // namespace block
