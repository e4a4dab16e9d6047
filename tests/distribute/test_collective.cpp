// The replicas' group and threads on their own (also built under ThreadSanitizer in CI): sums are exact and
// the same on every replica, disagreements and failures end every replica's wait with one clear error.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "nn/distribute/local_collective.h"
#include "nn/distribute/replica_runner.h"
#include "trainkit/core/error.h"

namespace tk::nn::distribute {
namespace {

using std::chrono::milliseconds;

// One input and one output row of n floats per replica.
struct Rows {
  Rows(int replicas, int64_t n, float value)
      : n(n),
        in(static_cast<size_t>(replicas), std::vector<float>(static_cast<size_t>(n), value)),
        out(static_cast<size_t>(replicas), std::vector<float>(static_cast<size_t>(n), -1.0f)) {}
  // Replica r's collective over its rows.
  void all_reduce(LocalCollective& c, int r, const char* name, int64_t id, float weight = 1.0f) {
    c.all_reduce(r, in[static_cast<size_t>(r)].data(), out[static_cast<size_t>(r)].data(), n, weight, name, id);
  }
  int64_t n;
  std::vector<std::vector<float>> in, out;
};

TEST(LocalCollective, SumsWeightedGradientsInReplicaOrderIntoEveryReplica) {
  for (int replicas : {1, 2, 3}) {
    LocalCollective c(replicas, milliseconds(20000));
    ReplicaRunner runner(replicas);
    const int64_t n = 2500;  // not a multiple of the replica count or of the reduction block
    Rows rows(3, n, 0.0f);
    auto& in = rows.in;
    auto& out = rows.out;
    for (int r = 0; r < 3; ++r)
      for (int64_t i = 0; i < n; ++i) in[r][static_cast<size_t>(i)] = static_cast<float>((i * 7 + r * 13) % 101) - 50;
    const float weight[3] = {0.5f, 0.25f, 0.25f};
    c.begin_step(replicas);
    runner.run(
        replicas, 1,
        [&](int r) {
          for (int64_t k = 0; k < 3; ++k)  // three collectives in a row, as a program's gradients
            rows.all_reduce(c, r, "grad", k, weight[r]);
        },
        &c);
    for (int r = 0; r < replicas; ++r)
      for (int64_t i = 0; i < n; ++i) {
        float want = in[0][static_cast<size_t>(i)] * weight[0];
        for (int q = 1; q < replicas; ++q) want += in[static_cast<size_t>(q)][static_cast<size_t>(i)] * weight[q];
        ASSERT_EQ(out[static_cast<size_t>(r)][static_cast<size_t>(i)], want) << "replicas " << replicas << " r " << r;
      }
    EXPECT_EQ(c.collectives(), 3);
  }
}

TEST(LocalCollective, ProgramsThatDifferAreAnErrorOnEveryReplicaNotAHang) {
  LocalCollective c(2, milliseconds(20000));
  ReplicaRunner runner(2);
  Rows rows(2, 10, 1.0f);
  c.begin_step(2);
  try {
    runner.run(
        2, 1,
        [&](int r) {
          if (r == 0)
            rows.all_reduce(c, 0, "dense/kernel/all_reduce", 0);
          else
            rows.all_reduce(c, 1, "dense/bias/all_reduce", 1);
        },
        &c);
    FAIL() << "expected CollectiveError";
  } catch (const CollectiveError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("all-reduce mismatch"), std::string::npos) << m;
    EXPECT_NE(m.find("dense/kernel/all_reduce"), std::string::npos) << m;
    EXPECT_NE(m.find("dense/bias/all_reduce"), std::string::npos) << m;
  }
}

TEST(LocalCollective, AReplicaThatNeverArrivesTimesOutNamingItAndTheCollective) {
  LocalCollective c(3, milliseconds(300));
  ReplicaRunner runner(3);
  Rows rows(3, 4, 1.0f);
  c.begin_step(3);
  try {
    runner.run(
        3, 1,
        [&](int r) {
          if (r == 2) return;  // stuck elsewhere (it never calls the collective)
          rows.all_reduce(c, r, "conv2d/kernel/all_reduce", 0);
        },
        &c);
    FAIL() << "expected CollectiveError";
  } catch (const CollectiveError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("conv2d/kernel/all_reduce"), std::string::npos) << m;
    EXPECT_NE(m.find("for replica(s) 2"), std::string::npos) << m;
    EXPECT_NE(m.find("TK_COLLECTIVE_TIMEOUT"), std::string::npos) << m;
  }
  // The group works again for the next step.
  c.begin_step(2);
  runner.run(
      2, 1, [&](int r) { rows.all_reduce(c, r, "next", 0); }, &c);
  EXPECT_EQ(rows.out[1][0], 2.0f);
}

TEST(ReplicaRunner, AFailingReplicaEndsTheOthersWaitAndItsOwnErrorIsTheOneRethrown) {
  // No timeout that could end the wait within the test's life (ctest's limit would fail it first): only the abort
  // can end the other replicas' wait, so the test finishing at all is the check, not a measured duration.
  LocalCollective c(3, std::chrono::hours(24));
  ReplicaRunner runner(3);
  Rows rows(3, 4, 1.0f);
  c.begin_step(3);
  try {
    runner.run(
        3, 1,
        [&](int r) {
          if (r == 1) throw OutOfMemoryError("replica 1: cpu:1 budget exhausted");
          rows.all_reduce(c, r, "g", 0);
        },
        &c);
    FAIL() << "expected the replica's own error";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("cpu:1 budget exhausted"), std::string::npos);
  }
}

TEST(ReplicaRunner, RunsEveryReplicaOncePerStepOnItsOwnThread) {
  ReplicaRunner runner(3);
  for (int step = 0; step < 50; ++step) {
    const int active = 1 + step % 3;
    std::vector<std::thread::id> ids(3);
    std::vector<int> calls(3, 0);
    runner.run(
        active, 1,
        [&](int r) {
          ids[static_cast<size_t>(r)] = std::this_thread::get_id();
          ++calls[static_cast<size_t>(r)];
        },
        nullptr);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(calls[static_cast<size_t>(r)], r < active ? 1 : 0);
    EXPECT_EQ(ids[0], std::this_thread::get_id());
    if (active > 1) EXPECT_NE(ids[1], ids[0]);
  }
}

}  // namespace
}  // namespace tk::nn::distribute
