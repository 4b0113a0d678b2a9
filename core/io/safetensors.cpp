// safetensors reader and writer. The reader trusts nothing in the file: every number from the
// header is range-checked before it is used as a size or an offset, so a corrupt file is an Error,
// never a crash or a huge allocation.
#include "core/io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

namespace kiln {

// NOTE: the format is little-endian and kiln copies bytes as they are.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using json = nlohmann::json;

// Same bound as the reference implementation: a header larger than this is not a real file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{DType::f32, "F32"}, {DType::f16, "F16"}, {DType::bf16, "BF16"}, {DType::i32, "I32"},
                                 {DType::i64, "I64"}, {DType::u8, "U8"},   {DType::f64, "F64"}};

std::string accepted_dtypes() {
  std::string s;
  for (const auto& d : kDTypes) s += std::string(s.empty() ? "" : ", ") + d.name;
  return s;
}

// A non-negative integer from the header, or an Error naming `what`.
uint64_t header_uint(const json& v, const std::string& file, const std::string& what) {
  KILN_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), "safetensors file ", file,
             ": ", what, " must be a non-negative integer, got ", v.dump());
  return v.get<uint64_t>();
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& file, const std::string& name, const json& info) {
  std::string where = "tensor '" + name + "'";
  KILN_CHECK(info.is_object(), "safetensors file ", file, ": ", where, " must be an object, got ", info.dump());
  for (auto it = info.begin(); it != info.end(); ++it)
    KILN_CHECK(it.key() == "dtype" || it.key() == "shape" || it.key() == "data_offsets", "safetensors file ", file,
               ": ", where, " has an unknown field '", it.key(), "'; accepted: dtype, shape, data_offsets");
  KILN_CHECK(info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"), "safetensors file ",
             file, ": ", where, " needs dtype, shape and data_offsets, got ", info.dump());
  const json& dt = info["dtype"];
  KILN_CHECK(dt.is_string(), "safetensors file ", file, ": ", where, " has a non-string dtype ", dt.dump());
  Entry e;
  e.name = name;
  try {
    e.dtype = parse_safetensors_dtype(dt.get<std::string>());
  } catch (const Error& err) {
    KILN_FAIL("safetensors file ", file, ": ", where, ": ", err.what());
  }
  const json& shape = info["shape"];
  KILN_CHECK(shape.is_array(), "safetensors file ", file, ": ", where, " has a shape that is not an array: ", shape.dump());
  // numel * element size must not overflow; it is compared with the byte range below.
  uint64_t bytes = dtype_size(e.dtype);
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t d = header_uint(shape[i], file, where + " shape[" + std::to_string(i) + "]");
    KILN_CHECK(d <= static_cast<uint64_t>(INT64_MAX) && !__builtin_mul_overflow(bytes, d, &bytes), "safetensors file ",
               file, ": ", where, " has a shape too large: ", shape.dump());
    e.shape.push_back(static_cast<int64_t>(d));
  }
  const json& off = info["data_offsets"];
  KILN_CHECK(off.is_array() && off.size() == 2, "safetensors file ", file, ": ", where,
             " data_offsets must be [begin, end], got ", off.dump());
  e.begin = header_uint(off[0], file, where + " data_offsets[0]");
  e.end = header_uint(off[1], file, where + " data_offsets[1]");
  KILN_CHECK(e.begin <= e.end, "safetensors file ", file, ": ", where, " data_offsets ", off.dump(), " end before begin");
  KILN_CHECK(e.end - e.begin == bytes, "safetensors file ", file, ": ", where, " of dtype ", dt.get<std::string>(),
             " and shape ", shape_str(e.shape), " needs ", bytes, " bytes, data_offsets ", off.dump(), " give ",
             e.end - e.begin);
  return e;
}

// Checks that the entries tile [0, data_bytes) exactly.
void check_layout(const std::string& file, std::vector<Entry>& entries, uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    KILN_CHECK(e.end <= data_bytes, "safetensors file ", file, ": tensor '", e.name, "' data_offsets [", e.begin, ", ",
               e.end, "] are out of range: the data block has ", data_bytes, " bytes (file truncated?)");
    KILN_CHECK(e.begin >= pos, "safetensors file ", file, ": tensor '", e.name, "' data_offsets [", e.begin, ", ", e.end,
               "] overlap tensor '", prev ? prev->name : "", "' [", prev ? prev->begin : 0, ", ", pos, "]");
    KILN_CHECK(e.begin == pos, "safetensors file ", file, ": bytes [", pos, ", ", e.begin,
               ") of the data block belong to no tensor (before tensor '", e.name, "')");
    pos = e.end;
    prev = &e;
  }
  KILN_CHECK(pos == data_bytes, "safetensors file ", file, ": the data block has ", data_bytes,
             " bytes but the tensors cover ", pos, " (trailing bytes)");
}

// Reads exactly n bytes at `offset`, or throws.
void read_at(std::ifstream& in, const std::string& file, uint64_t offset, void* dst, uint64_t n) {
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
  KILN_CHECK(in && static_cast<uint64_t>(in.gcount()) == n, "safetensors file ", file, ": read of ", n,
             " bytes at offset ", offset, " failed");
}

std::string errno_str() { return std::strerror(errno); }

// write(2) until done; partial writes and EINTR are retried.
void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    KILN_CHECK(w > 0, "safetensors: writing ", path, " failed: ", errno_str());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  KILN_FAIL("safetensors: no name for dtype ", dtype_name(t));
}

DType parse_safetensors_dtype(const std::string& s) {
  for (const auto& d : kDTypes)
    if (s == d.name) return d.dtype;
  KILN_FAIL("unsupported dtype '", s, "'; kiln reads ", accepted_dtypes());
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Largest element first, then by name: every tensor's offset is a multiple of its element size.
  std::vector<std::pair<std::string, Tensor>> order;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(name != "__metadata__", "safetensors: cannot write ", path, ": '__metadata__' is reserved, not a tensor name");
    KILN_CHECK(t.defined(), "safetensors: cannot write ", path, ": tensor '", name, "' is undefined");
    Tensor c = t.detach();
    if (!c.device().is_cpu()) c = c.to(Device::cpu());
    order.emplace_back(name, c.contiguous());
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second.dtype()) > dtype_size(b.second.dtype());
  });

  json header = json::object();
  uint64_t pos = 0;
  for (const auto& [name, t] : order) {
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {pos, pos + t.nbytes()}}};
    pos += t.nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t n = text.size();

  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  KILN_CHECK(fd >= 0, "safetensors: cannot create ", tmp, ": ", errno_str());
  try {
    write_all(fd, &n, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (const auto& [name, t] : order) write_all(fd, t.raw_data(), t.nbytes(), tmp);
    KILN_CHECK(::fsync(fd) == 0, "safetensors: fsync of ", tmp, " failed: ", errno_str());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    std::string err = errno_str();
    ::unlink(tmp.c_str());
    KILN_FAIL("safetensors: closing ", tmp, " failed: ", err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = errno_str();
    ::unlink(tmp.c_str());
    KILN_FAIL("safetensors: renaming ", tmp, " to ", path, " failed: ", err);
  }
  // Make the rename itself durable (best effort: some filesystems refuse fsync on a directory).
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

SafetensorsContents load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.is_open(), "safetensors: cannot open ", path, ": ", errno_str());
  in.seekg(0, std::ios::end);
  auto end = in.tellg();
  KILN_CHECK(end >= 0, "safetensors file ", path, ": cannot determine its size");
  uint64_t file_bytes = static_cast<uint64_t>(end);
  KILN_CHECK(file_bytes >= 8, "safetensors file ", path, " is truncated: ", file_bytes,
             " bytes, but the header length alone takes 8");
  uint64_t n = 0;
  read_at(in, path, 0, &n, 8);
  KILN_CHECK(n <= kMaxHeaderBytes, "safetensors file ", path, ": header length ", n, " is larger than the limit of ",
             kMaxHeaderBytes, " bytes (not a safetensors file?)");
  KILN_CHECK(n <= file_bytes - 8, "safetensors file ", path, ": header length ", n, " exceeds the ", file_bytes - 8,
             " bytes after the length field (truncated file?)");
  std::string text(n, '\0');
  read_at(in, path, 8, text.data(), n);
  KILN_CHECK(n > 0 && text[0] == '{', "safetensors file ", path, ": the header does not start with '{' (not a safetensors file?)");

  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    KILN_FAIL("safetensors file ", path, ": the header is not valid JSON: ", e.what());
  }
  KILN_CHECK(header.is_object(), "safetensors file ", path, ": the header must be a JSON object");

  SafetensorsContents out;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      KILN_CHECK(it.value().is_object(), "safetensors file ", path, ": __metadata__ must be an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        KILN_CHECK(m.value().is_string(), "safetensors file ", path, ": __metadata__ entry '", m.key(),
                   "' must be a string, got ", m.value().dump());
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, it.key(), it.value()));
  }
  uint64_t data_start = 8 + n;
  check_layout(path, entries, file_bytes - data_start);

  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) read_at(in, path, data_start + e.begin, t.raw_data(), e.end - e.begin);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace kiln
