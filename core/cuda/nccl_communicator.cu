// kiln::Communicator over NCCL (nccl_comm.h): what the trainer's data-parallel code (GradSync,
// weight broadcast, metric sums) talks to when its replicas are GPUs; and the kernels of
// core/comm.h's communicator slots that create it (its make_device_communicator and
// make_local_communicators reach them through the slots).
#include <chrono>

#include "core/cuda/nccl_comm.h"
#include "core/cuda/runtime.h"

namespace kiln::cuda {

namespace {

class NcclCommunicator;

class NcclWork : public Work {
 public:
  explicit NcclWork(NcclCommunicator& c) : c_(c) {}
  void wait() override;
  bool test() override {
    wait();
    return true;
  }

 private:
  NcclCommunicator& c_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<NcclComm> nccl, std::unique_ptr<Communicator> also)
      : nccl_(std::move(nccl)), also_(std::move(also)) {
    KILN_CHECK(nccl_, "make_nccl_communicator: no NCCL communicator");
    if (also_) set_timeout(also_->timeout());
  }
  int rank() const override { return nccl_->rank(); }
  int size() const override { return nccl_->size(); }
  std::string backend() const override { return "nccl"; }

  std::unique_ptr<Work> all_reduce_sum_async(const Tensor& t) override {
    nccl_->all_reduce(t, ReduceOp::sum);
    return std::make_unique<NcclWork>(*this);
  }
  void broadcast(const Tensor& t, int root) override {
    nccl_->broadcast(t, root);
    sync();
  }
  void barrier() override {
    Tensor t = Tensor::zeros({1}, DType::f32, device());
    nccl_->all_reduce(t, ReduceOp::sum);
    sync();
  }
  void all_reduce_doubles(std::vector<double>& v) override {
    if (v.empty()) return;
    Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::f64).to(device());
    nccl_->all_reduce(t, ReduceOp::sum);
    sync();
    v = t.to(Device::cpu()).to_double_vector();
  }
  int64_t all_reduce_min(int64_t v) override {
    Tensor t = Tensor::from_vector(std::vector<int64_t>{v}, {1}, DType::i64).to(device());
    nccl_->all_reduce(t, ReduceOp::min);
    sync();
    return static_cast<int64_t>(t.to(Device::cpu()).to_double_vector()[0]);
  }
  void abort(int code) override {
    nccl_->abort();
    if (also_) also_->abort(code);
  }

  void sync() {
    nccl_->synchronize(std::chrono::duration<double>(timeout()).count());
  }

 private:
  Device device() const { return Device::cuda(nccl_->device()); }
  std::unique_ptr<NcclComm> nccl_;
  std::unique_ptr<Communicator> also_;
};

void NcclWork::wait() { c_.sync(); }

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<NcclComm> nccl, std::unique_ptr<Communicator> also) {
  return std::make_unique<NcclCommunicator>(std::move(nccl), std::move(also));
}

// --- the kernels of core/comm.h's communicator slots (used by its device-neutral functions) ---
std::string communicator_id() { return NcclComm::unique_id(); }

std::unique_ptr<Communicator> make_communicator(const std::string& id, int nranks, int rank, int device,
                                               double timeout_s, std::unique_ptr<Communicator> also) {
  return make_nccl_communicator(std::make_unique<NcclComm>(id, nranks, rank, device, timeout_s), std::move(also));
}

std::vector<std::unique_ptr<Communicator>> make_local_communicators(const std::vector<int>& devices) {
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& nc : NcclComm::create_local(devices)) comms.push_back(make_nccl_communicator(std::move(nc)));
  return comms;
}

}  // namespace kiln::cuda
