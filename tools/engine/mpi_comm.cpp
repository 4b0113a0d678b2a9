#include "tools/engine/mpi_comm.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#ifdef KILN_WITH_MPI
#include <mpi.h>
#endif

namespace kiln {

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const char* s = std::getenv(v);
    if (s && std::atoi(s) > 1) return true;
  }
  return false;
}

int local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

int local_size() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return 1;
}

std::unique_ptr<Communicator> make_process_communicator() {
  return launched_by_mpirun() ? make_mpi_communicator() : make_single_rank_communicator();
}

#ifndef KILN_WITH_MPI
void abort_job_if_mpi(int) {}
std::unique_ptr<Communicator> make_mpi_communicator() {
  KILN_FAIL("this process was started by mpirun, but kiln was built without MPI (install libopenmpi-dev and rebuild)");
}
#else

namespace {

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  KILN_FAIL("MPI call ", what, " failed: ", std::string(msg, len));
}

MPI_Datatype mpi_type(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    case DType::i32: return MPI_INT32_T;
    case DType::u8: return MPI_UINT8_T;
    default: KILN_FAIL("MPI collectives take f32, f64, i32, i64 or u8 tensors, not ", t.str());
  }
}

class MpiComm;

class MpiWork : public Work {
 public:
  MpiWork(MpiComm& c, MPI_Request r, const char* what, uint64_t seq)
      : comm_(c), req_(r), what_(std::string(what) + " #" + std::to_string(seq)), seq_(seq) {}
  void wait() override;
  bool test() override {
    if (done_) return true;
    int flag = 0;
    mpi_check(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    done_ = flag != 0;
    return done_;
  }

 private:
  MpiComm& comm_;
  MPI_Request req_;
  std::string what_;
  uint64_t seq_;
  bool done_ = false;
};

class MpiComm : public Communicator {
 public:
  MpiComm() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owns_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &notes_), "MPI_Comm_dup");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    last_seen_.assign(size_, 0);
  }
  ~MpiComm() override {
    drain_sends(/*all=*/false);
    if (owns_ && !aborted_) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  std::unique_ptr<Work> all_reduce_sum_async(const Tensor& t) override {
    check_host(t, "all_reduce");
    MPI_Request r;
    uint64_t k = arrive();
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()), mpi_type(t), MPI_SUM, comm_, &r),
              "MPI_Iallreduce");
    return std::make_unique<MpiWork>(*this, r, "all_reduce", k);
  }
  void broadcast(const Tensor& t, int root) override {
    check_host(t, "broadcast");
    MPI_Request r;
    uint64_t k = arrive();
    mpi_check(MPI_Ibcast(t.raw_data(), static_cast<int>(t.numel()), mpi_type(t), root, comm_, &r), "MPI_Ibcast");
    MpiWork(*this, r, "broadcast", k).wait();
  }
  void barrier() override {
    MPI_Request r;
    uint64_t k = arrive();
    mpi_check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
    MpiWork(*this, r, "barrier", k).wait();
  }
  void all_reduce_doubles(std::vector<double>& v) override {
    Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::f64);
    all_reduce_sum(t);
    v = t.to_double_vector();
  }
  int64_t all_reduce_min(int64_t v) override {
    MPI_Request r;
    uint64_t k = arrive();
    int64_t out = v;
    mpi_check(MPI_Iallreduce(&v, &out, 1, MPI_INT64_T, MPI_MIN, comm_, &r), "MPI_Iallreduce");
    MpiWork(*this, r, "all_reduce_min", k).wait();
    return out;
  }
  void abort(int code) override {
    aborted_ = true;
    MPI_Abort(MPI_COMM_WORLD, code);
  }

  // Names the ranks that have not posted their note for collective `k`.
  std::string missing_ranks(uint64_t k) {
    int flag = 1;
    while (flag) {  // read every note that has come in
      MPI_Status st;
      mpi_check(MPI_Iprobe(MPI_ANY_SOURCE, kNoteTag, notes_, &flag, &st), "MPI_Iprobe");
      if (flag) {
        uint64_t seq = 0;
        MPI_Recv(&seq, 1, MPI_UINT64_T, st.MPI_SOURCE, kNoteTag, notes_, MPI_STATUS_IGNORE);
        last_seen_[st.MPI_SOURCE] = std::max(last_seen_[st.MPI_SOURCE], seq);
      }
    }
    std::string s;
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && last_seen_[r] < k)
        s += (s.empty() ? "" : ", ") + std::to_string(r) + " (last seen at #" + std::to_string(last_seen_[r]) + ")";
    return s.empty() ? "none missing; a peer may have failed inside the collective" : s;
  }

 private:
  static constexpr int kNoteTag = 7;

  void check_host(const Tensor& t, const char* what) {
    KILN_CHECK(t.device().is_cpu() && t.is_contiguous(), "MPI ", what, " takes contiguous CPU tensors, not ", t.str());
  }
  // Posts "arrived at #k" to every peer (skipped for large jobs, where it would cost O(N^2)).
  uint64_t arrive() {
    uint64_t k = ++seq_;
    drain_sends(false);
    if (size_ <= 64) {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        sends_.emplace_back();
        sends_.back().value = k;
        mpi_check(MPI_Isend(&sends_.back().value, 1, MPI_UINT64_T, r, kNoteTag, notes_, &sends_.back().req), "MPI_Isend");
      }
    }
    return k;
  }
  void drain_sends(bool) {
    while (!sends_.empty()) {
      int flag = 0;
      MPI_Test(&sends_.front().req, &flag, MPI_STATUS_IGNORE);
      if (!flag) break;
      sends_.pop_front();
    }
  }

  struct Note {
    uint64_t value = 0;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  MPI_Comm comm_ = MPI_COMM_NULL, notes_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool owns_ = false, aborted_ = false;
  uint64_t seq_ = 0;
  std::vector<uint64_t> last_seen_;
  std::deque<Note> sends_;  // deque: element addresses stay valid while MPI holds them
};

void MpiWork::wait() {
  auto deadline = std::chrono::steady_clock::now() + comm_.timeout();
  auto pause = std::chrono::microseconds(20);
  while (!test()) {
    if (std::chrono::steady_clock::now() > deadline) {
      KILN_FAIL("rank ", comm_.rank(), ": ", what_, " did not finish within ",
                std::chrono::duration_cast<std::chrono::seconds>(comm_.timeout()).count(),
                " s; ranks that did not arrive: ", comm_.missing_ranks(seq_));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiComm>(); }

void abort_job_if_mpi(int code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  }
}
#endif

}  // namespace kiln
