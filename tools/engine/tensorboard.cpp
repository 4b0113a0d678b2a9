// TensorBoard event files (see tensorboard.h).
#include "tools/engine/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>

#include "core/check.h"
#include "tensorboard_event.pb.h"  // generated from tools/engine/tensorboard_event.proto

namespace fs = std::filesystem;

namespace kiln {

namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto& t = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::string& dir) {
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = 0;
  auto secs = static_cast<long long>(unix_now());
  do {
    path_ = dir + "/events.out.tfevents." + std::to_string(secs++) + "." + host;
  } while (fs::exists(path_));
  out_.open(path_, std::ios::binary);
  KILN_CHECK(out_.good(), "cannot write the TensorBoard event file '", path_, "' (train.tensorboard=false turns it off)");
  tensorboard::Event e;
  e.set_wall_time(unix_now());
  e.set_file_version("brain.Event:2");
  write_event(e.SerializeAsString());
}

void EventWriter::write_event(const std::string& data) {
  std::string rec;
  rec.reserve(data.size() + 16);
  const uint64_t len = data.size();
  for (int i = 0; i < 8; ++i) rec.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  put_u32(rec, masked_crc32c(rec.data(), 8));
  rec += data;
  put_u32(rec, masked_crc32c(data.data(), data.size()));
  out_.write(rec.data(), static_cast<std::streamsize>(rec.size()));
  out_.flush();
  KILN_CHECK(out_.good(), "writing the TensorBoard event file '", path_, "' failed (disk full?)");
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event e;
  e.set_wall_time(unix_now());
  e.set_step(step);
  for (const auto& [tag, v] : values) {
    if (!std::isfinite(v)) continue;  // not evaluated this epoch, or no loss scale: no point
    tensorboard::Summary::Value* sv = e.mutable_summary()->add_value();
    sv->set_tag(tag);
    sv->set_simple_value(static_cast<float>(v));
  }
  if (e.summary().value_size() > 0) write_event(e.SerializeAsString());
}

void EventWriter::session_start(int64_t step) {
  tensorboard::Event e;
  e.set_wall_time(unix_now());
  e.set_step(step);
  e.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  write_event(e.SerializeAsString());
}

std::vector<EventRecord> read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "cannot read the event file '", path, "'");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<EventRecord> out;
  size_t off = 0;
  while (off < bytes.size()) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + off);
    const std::string where = "event file '" + path + "', record " + std::to_string(out.size() + 1) + " at byte " +
                              std::to_string(off);
    KILN_CHECK(bytes.size() - off >= 12, where, ": cut short in its header");
    KILN_CHECK(get_le(p + 8, 4) == masked_crc32c(p, 8), where, ": the length's CRC does not match (damaged)");
    const uint64_t len = get_le(p, 8);
    KILN_CHECK(len <= bytes.size() - off - 16, where, ": cut short (", len, " bytes of data announced)");
    KILN_CHECK(get_le(p + 12 + len, 4) == masked_crc32c(p + 12, len), where, ": the data's CRC does not match (damaged)");
    tensorboard::Event e;
    KILN_CHECK(e.ParseFromArray(p + 12, static_cast<int>(len)), where, ": not an Event message");
    EventRecord r;
    r.wall_time = e.wall_time();
    r.step = e.step();
    r.file_version = e.file_version();
    for (const auto& v : e.summary().value()) r.scalars.emplace_back(v.tag(), v.simple_value());
    if (e.has_session_log()) r.session_status = static_cast<int>(e.session_log().status());
    out.push_back(std::move(r));
    off += 16 + len;
  }
  return out;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path().string());
  // events.out.tfevents.<unix time>.<host>: the same width of seconds for centuries, so by name is by time
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace kiln
