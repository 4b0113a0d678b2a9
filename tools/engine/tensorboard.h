// TensorBoard event files: runs/<name>/events.out.tfevents.<unix time>.<host>, which TensorBoard
// (and anything that reads its format) shows as charts. A file is a sequence of TFRecord records,
//   uint64 length | uint32 masked CRC32C of the 8 length bytes | data | uint32 masked CRC32C of data
// (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), each record's data one Event
// (tools/engine/tensorboard_event.proto, kiln's own subset of TensorBoard's messages): the first
// carries the file version, the others scalars at a step, or a SessionLog START at a resumed run's
// first step, from which TensorBoard drops the older files' points (a run killed after its last
// checkpoint had written some past it). Tests: tests/engine/watch_test.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes, continuing from `crc`.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The TFRecord format's masked CRC32C.
uint32_t masked_crc32c(const void* data, size_t n);

class EventWriter {
 public:
  // Creates a new event file in `dir` (an existing name gains a later second) and writes its version record.
  explicit EventWriter(const std::string& dir);
  // Scalars (tag, value) at `step`, written and flushed (a watching TensorBoard sees them at once).
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // SessionLog START at `step`: TensorBoard forgets every point at `step` or later from earlier files.
  void session_start(int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& bytes);
  std::string path_;
  std::ofstream out_;
};

// One event read back.
struct EventRecord {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;                            // set in a file's first record
  std::vector<std::pair<std::string, float>> scalars;  // a summary's (tag, simple_value)
  int session_status = 0;                              // SessionLog's status (1 = START), 0 without one
};

// Every record of an event file, each length and data checked against its CRC; a damaged or cut
// file is an error naming the file, the record and its offset.
std::vector<EventRecord> read_event_file(const std::string& path);

// The event files of a run folder, oldest first.
std::vector<std::string> event_files(const std::string& dir);

}  // namespace kiln
