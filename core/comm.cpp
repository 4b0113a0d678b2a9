#include "core/comm.h"

#include <condition_variable>
#include <cstring>
#include <mutex>

namespace kiln {

namespace {
class DoneWork : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class SingleRank : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  std::unique_ptr<Work> all_reduce_sum_async(const Tensor&) override { return std::make_unique<DoneWork>(); }
  void broadcast(const Tensor&, int root) override {
    KILN_CHECK(root == 0, "broadcast from rank ", root, " with a single rank");
  }
  void barrier() override {}
  void all_reduce_doubles(std::vector<double>&) override {}
  int64_t all_reduce_min(int64_t v) override { return v; }
  void abort(int) override {}
};
// The state the threads of make_thread_communicators share. A collective is: publish a pointer,
// meet (everyone has published), work on the published buffers (each rank writes a disjoint part,
// or only its own), meet again (nobody still reads). meet() is a generation barrier with a
// deadline; `arrived[r]` holds the last generation rank r reached, to name the missing ranks.
struct ThreadGroup {
  explicit ThreadGroup(int n) : n(n), ptrs(static_cast<size_t>(n)), arrived(static_cast<size_t>(n), 0) {}
  const int n;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t generation = 0;
  int waiting = 0;
  int aborted_by = -1;
  std::vector<void*> ptrs;
  std::vector<uint64_t> arrived;

  void meet(int rank, std::chrono::milliseconds timeout, const char* what) {
    std::unique_lock<std::mutex> lk(mu);
    check_abort(rank);
    const uint64_t gen = generation;
    arrived[static_cast<size_t>(rank)] = gen + 1;
    if (++waiting == n) {
      waiting = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    bool done = cv.wait_for(lk, timeout, [&] { return generation != gen || aborted_by >= 0; });
    check_abort(rank);
    if (!done) {
      std::string missing;
      for (int r = 0; r < n; ++r)
        if (arrived[static_cast<size_t>(r)] <= gen) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      aborted_by = rank;  // the others must not wait for this rank either
      cv.notify_all();
      KILN_FAIL("rank ", rank, ": ", what, " did not finish within ", std::chrono::duration<double>(timeout).count(),
                " s; ranks that did not arrive: ", missing);
    }
  }
  void check_abort(int rank) {
    if (aborted_by >= 0 && aborted_by != rank)
      KILN_FAIL("rank ", rank, ": rank ", aborted_by, " failed or timed out; this replica stops too");
  }
};

class ThreadComm : public Communicator {
 public:
  ThreadComm(std::shared_ptr<ThreadGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->n; }
  std::string backend() const override { return "threads"; }

  std::unique_ptr<Work> all_reduce_sum_async(const Tensor& t) override {
    check_host(t, "all_reduce");
    publish(t.raw_data());
    g_->meet(rank_, timeout(), "all_reduce");
    // Rank r sums and writes back elements [lo, hi): disjoint parts, so no two ranks write one place.
    const int64_t n = t.numel(), lo = n * rank_ / g_->n, hi = n * (rank_ + 1) / g_->n;
    switch (t.dtype()) {
      case DType::f32: sum_range<float>(lo, hi); break;
      case DType::f64: sum_range<double>(lo, hi); break;
      case DType::i64: sum_range<int64_t>(lo, hi); break;
      default: KILN_FAIL("all_reduce between threads takes f32, f64 or i64 tensors, not ", t.str());
    }
    g_->meet(rank_, timeout(), "all_reduce");
    return std::make_unique<DoneWork>();
  }
  void broadcast(const Tensor& t, int root) override {
    KILN_CHECK(root >= 0 && root < g_->n, "broadcast from rank ", root, " of ", g_->n);
    check_host(t, "broadcast");
    publish(t.raw_data());
    g_->meet(rank_, timeout(), "broadcast");
    if (rank_ != root) std::memcpy(t.raw_data(), g_->ptrs[static_cast<size_t>(root)], t.nbytes());
    g_->meet(rank_, timeout(), "broadcast");
  }
  void barrier() override { g_->meet(rank_, timeout(), "barrier"); }
  void all_reduce_doubles(std::vector<double>& v) override {
    Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::f64);
    all_reduce_sum(t);
    v = t.to_double_vector();
  }
  int64_t all_reduce_min(int64_t v) override {
    publish(&v);
    g_->meet(rank_, timeout(), "all_reduce_min");
    int64_t m = v;
    for (void* p : g_->ptrs) m = std::min(m, *static_cast<int64_t*>(p));
    g_->meet(rank_, timeout(), "all_reduce_min");
    return m;
  }
  void abort(int) override {
    std::lock_guard<std::mutex> lk(g_->mu);
    if (g_->aborted_by < 0) g_->aborted_by = rank_;
    g_->cv.notify_all();
  }

 private:
  void check_host(const Tensor& t, const char* what) {
    KILN_CHECK(t.device().is_cpu() && t.is_contiguous(), "thread ", what, " takes contiguous CPU tensors, not ", t.str());
  }
  void publish(void* p) {
    std::lock_guard<std::mutex> lk(g_->mu);
    g_->ptrs[static_cast<size_t>(rank_)] = p;
  }
  template <typename T>
  void sum_range(int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      T s = 0;
      for (void* p : g_->ptrs) s += static_cast<T*>(p)[i];  // rank order: the same sum on every rank
      for (void* p : g_->ptrs) static_cast<T*>(p)[i] = s;
    }
  }

  std::shared_ptr<ThreadGroup> g_;
  int rank_;
};
}  // namespace

std::unique_ptr<Communicator> make_single_rank_communicator() { return std::make_unique<SingleRank>(); }

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n) {
  KILN_CHECK(n >= 1, "make_thread_communicators: need at least one rank, got ", n);
  auto g = std::make_shared<ThreadGroup>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadComm>(g, r));
  return out;
}

KILN_DEFINE_KERNEL_SLOT(communicator_id);
KILN_DEFINE_KERNEL_SLOT(make_communicator);
KILN_DEFINE_KERNEL_SLOT(make_local_communicators);

bool has_device_communicators(Device device) {
  return communicator_id_kernel.find(device, "has_device_communicators") != nullptr;
}

std::string communicator_id(Device device) {
  check_available(device, "communicator_id");
  return communicator_id_kernel.get(device)();
}

std::unique_ptr<Communicator> make_device_communicator(const std::string& id, int nranks, int rank, Device device,
                                                       double timeout_s, std::unique_ptr<Communicator> also) {
  check_available(device, "make_device_communicator");
  return make_communicator_kernel.get(device, "make_device_communicator")(id, nranks, rank, device.index, timeout_s,
                                                                          std::move(also));
}

std::vector<std::unique_ptr<Communicator>> make_local_communicators(const std::vector<Device>& devices) {
  KILN_CHECK(!devices.empty(), "make_local_communicators: no devices");
  std::vector<int> indices;
  for (const Device& d : devices) {
    KILN_CHECK(d.type == devices[0].type, "make_local_communicators: devices of different kinds: ", devices[0].str(),
               " and ", d.str());
    indices.push_back(d.index);
  }
  check_available(devices[0], "make_local_communicators");
  return make_local_communicators_kernel.get(devices[0])(indices);
}

}  // namespace kiln
