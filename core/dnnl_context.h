// The CPU backend's oneDNN context: one CPU engine for the process, a stream per thread, and a
// thread-safe, size-bounded (LRU) cache of primitives keyed by op, shapes, strides, parameters and
// dtypes, so each shape's primitive (and its JIT code) is created once and reused every step.
//
//   auto prim = dnnl_cache().get_or_create<ConvFwd>(key, [&] { return std::make_shared<ConvFwd>(...); });
//   dnnl_execute(prim->prim, prim->pd, {{DNNL_ARG_SRC, ...}, ...});
//
// Primitives run with a user-managed scratchpad allocated from kiln's caching allocator, so the
// memory counters (AutoBatch, leak tests) see it and the blocks are reused between steps.
// Used by core/ops/*_cpu.cpp; tested through tests/core/conv2d_test.cpp and linear_test.cpp.
#pragma once
#include <dnnl.hpp>

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <typeindex>
#include <unordered_map>

#include "core/tensor.h"

namespace kiln {

dnnl::engine& dnnl_engine();
// The calling thread's stream on dnnl_engine() (a stream is not meant to be shared across threads).
dnnl::stream& dnnl_stream();

// oneDNN's data type for a kiln dtype (f32, bf16, f16, i32, u8); throws for the others.
dnnl::memory::data_type dnnl_dtype(DType t);
// True when oneDNN can run `t` natively for compute primitives on this CPU (bf16 and f16 need
// avx512 extensions in oneDNN 2.6; ops compute in f32 and round when this is false).
bool dnnl_native_compute(DType t);

// Builds cache keys: CacheKey("conv_fwd").add(x.shape()).add(p.stride_h)... -> "conv_fwd|2,3,5,7|1|".
class CacheKey {
 public:
  explicit CacheKey(const char* op) : s_(op) { s_ += '|'; }
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
PrimitiveCache& dnnl_cache();

// A primitive with the descriptor it was made from (for its memory descs and scratchpad size).
template <typename P>
struct CachedPrimitive {
  typename P::primitive_desc pd;
  P prim;
  explicit CachedPrimitive(const typename P::primitive_desc& d) : pd(d), prim(d) {}
};

// Wraps a CPU tensor's data as a oneDNN memory (no copy).
dnnl::memory dnnl_memory(const dnnl::memory::desc& md, const Tensor& t);

// Executes `prim` on this thread's stream and waits. Adds a scratchpad from kiln's allocator when
// `pd` asks for one.
void dnnl_execute(const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
                  std::unordered_map<int, dnnl::memory> args);

// Copies `src` into memory laid out as `dst_md` (a reorder primitive, cached). Returns `src`
// itself when the layouts already agree. The result owns a kiln tensor for its buffer.
struct Reordered {
  dnnl::memory mem;
  Tensor buffer;  // keeps the data alive when a copy was made
};
Reordered dnnl_reorder_to(const dnnl::memory& src, const Tensor& src_owner, const dnnl::memory::desc& dst_md);
// Reorders `src` (any layout) into the plain tensor `dst` described by `dst_md`.
void dnnl_reorder_into(const dnnl::memory& src, const dnnl::memory::desc& dst_md, const Tensor& dst);

}  // namespace kiln
