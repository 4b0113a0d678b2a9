// The CPU backend's oneDNN context: one CPU engine for the process, a stream per thread, and a
// thread-safe, size-bounded (LRU) cache of primitives keyed by op, shapes, strides, parameters and
// dtypes, so each shape's primitive (and its JIT code) is created once and reused every step.
//
//   using P = onednn::CachedPrimitive<dnnl::convolution_forward>;
//   auto p = onednn::cache().get_or_create<P>(key, [&] { return std::make_shared<const P>(pd); });
//   onednn::execute(p->prim, p->pd, {{DNNL_ARG_SRC, onednn::wrap(md, x)}, ...});
//
// Everything lives in kiln::onednn (plain dnnl_* names would collide with oneDNN's C API types).
//
// Primitives run with a user-managed scratchpad allocated from kiln's caching allocator, so the
// memory counters (AutoBatch, leak tests) see it and the blocks are reused between steps.
// Used by core/ops/*_cpu.cpp; tests: tests/core/dnnl_context_test.cpp, and through conv2d_test.cpp and linear_test.cpp.
#pragma once
#include <cstdint>
#include <dnnl.hpp>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <typeindex>
#include <unordered_map>

#include "core/tensor.h"

namespace kiln::onednn {

dnnl::engine& engine();
// The calling thread's stream on engine() (a stream is not meant to be shared across threads).
dnnl::stream& stream();

// oneDNN's data type for a kiln dtype (f32, bf16, f16, i32, u8); throws for the others.
dnnl::memory::data_type data_type(DType t);
// True when oneDNN can run `t` natively for compute primitives on this CPU (bf16 and f16 need
// avx512 extensions in oneDNN 2.6; ops compute in f32 and round when this is false).
bool native_compute(DType t);
// True when the CPU has bf16 arithmetic units as oneDNN sees them (its effective ISA includes
// AVX-512 BF16: Cooper Lake, Sapphire Rapids' AMX, Zen 4). oneDNN 2.6 also runs bf16 on plain
// AVX-512 by emulation (native_compute(bf16) is true there), which is not faster than f32.
bool bf16_units();

// Attributes for every kiln primitive: the scratchpad is passed by execute() (user mode).
// NOTE: copying a dnnl::primitive_attr copies a handle to the same attributes, so adding post-ops
// to a copy of attr() would change every primitive created afterwards: use make_attr() for that.
const dnnl::primitive_attr& attr();
// A new attribute object with the settings of attr(), to add post-ops to.
dnnl::primitive_attr make_attr();

// Builds cache keys: CacheKey("conv_fwd").add(x.shape()).add(p.stride_h)... -> "conv_fwd|2,3,5,7|1|".
class CacheKey {
 public:
  // NOTE: the key starts with the OpenMP thread count: oneDNN sizes a primitive's scratchpad and
  // splits its work for the threads it sees at creation, so a primitive made inside a SerialScope
  // must not be run with more threads (that overflowed the scratchpad).
  explicit CacheKey(const char* op);
  CacheKey& add(int64_t v);
  CacheKey& add(const Shape& v);
  CacheKey& add(DType t);
  CacheKey& add(const char* tag);
  const std::string& str() const { return s_; }

 private:
  std::string s_;
};

// An LRU map from key to a shared, immutable entry of any type (a primitive plus its descriptor,
// or a "not supported here" marker). Lookups from several threads are safe; creation runs outside
// the lock, so a slow JIT compile does not block other lookups (two threads may both create the
// same entry; the first one inserted wins).
class PrimitiveCache {
 public:
  explicit PrimitiveCache(size_t capacity) : capacity_(capacity) {}

  template <typename T>
  std::shared_ptr<const T> get_or_create(const CacheKey& key, const std::function<std::shared_ptr<const T>()>& make) {
    std::type_index type(typeid(T));
    if (auto hit = lookup(key.str(), type)) return std::static_pointer_cast<const T>(hit);
    std::shared_ptr<const T> made = make();
    return std::static_pointer_cast<const T>(insert(key.str(), type, made));
  }

  size_t size() const;
  size_t capacity() const { return capacity_; }
  void clear();

 private:
  struct Entry {
    std::string key;
    std::type_index type;
    std::shared_ptr<const void> value;
  };
  std::shared_ptr<const void> lookup(const std::string& key, std::type_index type);
  std::shared_ptr<const void> insert(const std::string& key, std::type_index type, std::shared_ptr<const void> v);

  mutable std::mutex mu_;
  size_t capacity_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> map_;
};

// The process-wide cache used by the CPU ops (capacity: KILN_DNNL_CACHE_CAPACITY, default 1024).
PrimitiveCache& cache();

// A primitive with the descriptor it was made from (for its memory descs and scratchpad size).
template <typename P>
struct CachedPrimitive {
  typename P::primitive_desc pd;
  P prim;
  explicit CachedPrimitive(const typename P::primitive_desc& d) : pd(d), prim(d) {}
};

// While alive, and when `serial` is true, oneDNN works on the calling thread alone: for small
// problems a parallel region costs more than the work (waking the OpenMP team takes microseconds
// on an idle machine and milliseconds on a busy one, where the region waits for every thread to
// be scheduled). oneDNN reads omp_get_max_threads() when a primitive is created (JIT kernels fix
// their thread count then) and when reorders and GEMMs run, so hold one around both.
class SerialScope {
 public:
  explicit SerialScope(bool serial);
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  int prev_ = 0;  // the thread count to restore; 0 when nothing was changed
};
// Compute primitives under this many floating-point operations run serially (about 30 us on one core).
constexpr double kSerialFlops = 1e6;

// Wraps a CPU tensor's data as a oneDNN memory (no copy).
dnnl::memory wrap(const dnnl::memory::desc& md, const Tensor& t);

// Executes `prim` on this thread's stream and waits. Adds a scratchpad from kiln's allocator when
// `pd` asks for one.
void execute(const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory> args);

// Copies `src` into memory laid out as `dst_md` (a reorder primitive, cached). Returns `src`
// itself when the layouts already agree. The result owns a kiln tensor for its buffer.
struct Reordered {
  dnnl::memory mem;
  Tensor buffer;  // keeps the data alive when a copy was made
};
Reordered reorder_to(const dnnl::memory& src, const Tensor& src_owner, const dnnl::memory::desc& dst_md);
// Reorders `src` (any layout) into the plain tensor `dst` described by `dst_md`.
void reorder_into(const dnnl::memory& src, const dnnl::memory::desc& dst_md, const Tensor& dst);

// Where a primitive writes an output that belongs in the tensor `dst` (laid out as `dst_md`) while
// the primitive wants layout `got`: `dst` itself when the two agree, else a temporary that
// finish() reorders into `dst`.
class OutputMemory {
 public:
  OutputMemory(const dnnl::memory::desc& got, const dnnl::memory::desc& dst_md, const Tensor& dst);
  const dnnl::memory& mem() const { return mem_; }
  void finish() const;  // call after the primitive ran

 private:
  dnnl::memory mem_;
  dnnl::memory::desc dst_md_;
  Tensor dst_, tmp_;
};

}  // namespace kiln::onednn
