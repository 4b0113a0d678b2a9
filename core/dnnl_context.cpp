// oneDNN engine, per-thread streams, the primitive cache and the reorder/execute helpers.
// See core/dnnl_context.h.
#include "core/dnnl_context.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace kiln::onednn {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::memory::data_type data_type(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::f32:
      return dt::f32;
    case DType::bf16:
      return dt::bf16;
    case DType::f16:
      return dt::f16;
    case DType::i32:
      return dt::s32;
    case DType::u8:
      return dt::u8;
    default:
      KILN_FAIL("oneDNN has no data type for ", dtype_name(t));
  }
}

bool native_compute(DType t) {
  if (t == DType::f32) return true;
  if (t != DType::bf16 && t != DType::f16) return false;
  // oneDNN 2.6 gates its low-precision compute kernels (reference ones included) on the ISA, so a
  // tiny matmul descriptor answers for conv and matmul alike. Asked once per dtype.
  auto probe = [](DType d) {
    try {
      dnnl::memory::desc md({16, 16}, data_type(d), dnnl::memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  };
  static const bool bf16 = probe(DType::bf16);
  static const bool f16 = probe(DType::f16);
  return t == DType::bf16 ? bf16 : f16;
}

bool bf16_units() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);  // a bit mask: AMX contains it
  return (isa & bf16) == bf16;
}

dnnl::primitive_attr make_attr() {
  dnnl::primitive_attr r;
  r.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return r;
}

const dnnl::primitive_attr& attr() {
  static const dnnl::primitive_attr a = make_attr();
  return a;
}

// ---------------------------------------------------------------------------------------------
// Keys
CacheKey& CacheKey::add(int64_t v) {
  s_ += std::to_string(v);
  s_ += '|';
  return *this;
}

CacheKey& CacheKey::add(const Shape& v) {
  for (int64_t d : v) {
    s_ += std::to_string(d);
    s_ += ',';
  }
  s_ += '|';
  return *this;
}

CacheKey& CacheKey::add(DType t) { return add(dtype_name(t)); }

CacheKey& CacheKey::add(const char* tag) {
  s_ += tag;
  s_ += '|';
  return *this;
}

namespace {

// A memory descriptor's identity as text, for reorder keys: every field that a layout depends on.
void add_desc(CacheKey& k, const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  auto dims = [&](const dnnl_dims_t& v, int n) { return Shape(v, v + n); };
  k.add(d.ndims).add(dims(d.dims, d.ndims)).add(static_cast<int64_t>(d.data_type));
  k.add(dims(d.padded_dims, d.ndims)).add(dims(d.padded_offsets, d.ndims)).add(d.offset0);
  k.add(static_cast<int64_t>(d.format_kind));
  if (d.format_kind == dnnl_blocked) {
    const dnnl_blocking_desc_t& b = d.format_desc.blocking;
    k.add(dims(b.strides, d.ndims)).add(dims(b.inner_blks, b.inner_nblks)).add(dims(b.inner_idxs, b.inner_nblks));
  } else {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&d.format_desc);
    Shape raw(bytes, bytes + sizeof(d.format_desc));
    k.add(raw);
  }
  k.add(static_cast<int64_t>(d.extra.flags)).add(d.extra.compensation_mask);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Cache
std::shared_ptr<const void> PrimitiveCache::lookup(const std::string& key, std::type_index type) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  KILN_CHECK(it->second->type == type, "primitive cache: key '", key, "' was stored with another entry type");
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

std::shared_ptr<const void> PrimitiveCache::insert(const std::string& key, std::type_index type,
                                                   std::shared_ptr<const void> v) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) {  // another thread made it meanwhile: keep one
    KILN_CHECK(it->second->type == type, "primitive cache: key '", key, "' was stored with another entry type");
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->value;
  }
  lru_.push_front(Entry{key, type, std::move(v)});
  map_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    map_.erase(lru_.back().key);
    lru_.pop_back();
  }
  return lru_.front().value;
}

size_t PrimitiveCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

void PrimitiveCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
  lru_.clear();
}

PrimitiveCache& cache() {
  static PrimitiveCache cache([] {
    const char* env = std::getenv("KILN_DNNL_CACHE_CAPACITY");
    long v = env ? std::strtol(env, nullptr, 10) : 0;
    return v > 0 ? static_cast<size_t>(v) : size_t{1024};
  }());
  return cache;
}

// ---------------------------------------------------------------------------------------------
// Memory, execution, reorders
CacheKey::CacheKey(const char* op) : s_(std::to_string(omp_get_max_threads())) {
  s_ += '|';
  s_ += op;
  s_ += '|';
}

SerialScope::SerialScope(bool serial) {
  if (serial && omp_get_max_threads() > 1) {
    prev_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
}

SerialScope::~SerialScope() {
  if (prev_ > 0) omp_set_num_threads(prev_);
}

dnnl::memory wrap(const dnnl::memory::desc& md, const Tensor& t) {
  KILN_CHECK(t.device().is_cpu(), "oneDNN CPU memory from tensor ", t.str());
  return dnnl::memory(md, engine(), t.raw_data());
}

void execute(const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory> args) {
  Tensor scratch;
  dnnl::memory::desc sd = pd.scratchpad_desc();
  if (sd.get_size() > 0) {
    scratch = Tensor::empty({static_cast<int64_t>(sd.get_size())}, DType::u8);
    args.emplace(DNNL_ARG_SCRATCHPAD, wrap(sd, scratch));
  }
  dnnl::stream& s = stream();
  prim.execute(s, args);
  s.wait();
}

namespace {

std::shared_ptr<const CachedPrimitive<dnnl::reorder>> reorder_prim(const dnnl::memory::desc& from,
                                                                   const dnnl::memory::desc& to) {
  CacheKey key("reorder");
  add_desc(key, from);
  key.add("->");
  add_desc(key, to);
  return cache().get_or_create<CachedPrimitive<dnnl::reorder>>(key, [&] {
    dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, attr());
    return std::make_shared<const CachedPrimitive<dnnl::reorder>>(pd);
  });
}

// Reorders below this size run on the calling thread alone (see SerialScope): a weight tensor of a
// few hundred KB reorders in well under a millisecond on one core.
constexpr size_t kSerialReorderBytes = size_t{1} << 20;

void run_reorder(const dnnl::memory& from, const dnnl::memory& to) {
  SerialScope serial(std::max(from.get_desc().get_size(), to.get_desc().get_size()) < kSerialReorderBytes);
  auto r = reorder_prim(from.get_desc(), to.get_desc());  // created for the threads it runs with
  execute(r->prim, r->pd, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

}  // namespace

Reordered reorder_to(const dnnl::memory& src, const Tensor& src_owner, const dnnl::memory::desc& dst_md) {
  dnnl::memory::desc from = src.get_desc();
  if (from == dst_md) return {src, src_owner};
  Tensor buffer = Tensor::empty({static_cast<int64_t>(dst_md.get_size())}, DType::u8);
  dnnl::memory dst = wrap(dst_md, buffer);
  run_reorder(src, dst);
  return {dst, buffer};
}

void reorder_into(const dnnl::memory& src, const dnnl::memory::desc& dst_md, const Tensor& dst) {
  dnnl::memory out = wrap(dst_md, dst);
  if (src.get_desc() == dst_md) {
    if (src.get_data_handle() != out.get_data_handle())
      std::memcpy(dst.raw_data(), src.get_data_handle(), dst_md.get_size());
    return;
  }
  run_reorder(src, out);
}

OutputMemory::OutputMemory(const dnnl::memory::desc& got, const dnnl::memory::desc& dst_md, const Tensor& dst)
    : dst_md_(dst_md), dst_(dst) {
  if (got == dst_md) {
    mem_ = wrap(dst_md, dst);
  } else {
    tmp_ = Tensor::empty({static_cast<int64_t>(got.get_size())}, DType::u8);
    mem_ = wrap(got, tmp_);
  }
}

void OutputMemory::finish() const {
  if (tmp_.defined()) reorder_into(mem_, dst_md_, dst_);
}

}  // namespace kiln::onednn
