// MappedFile: a read-only memory map of a whole file (model weights are read through it without copying).
//
// Ownership: the MappedFile owns the mapping; pointers into data() live as long as it does. Share it with
// std::shared_ptr when several objects view the same bytes. Thread-safety: immutable after open().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace tessera {

class MappedFile {
 public:
  // NotFound for a missing file, InvalidArgument for a directory or an empty file, Unavailable otherwise.
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size) : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// Reads a whole (small) file into a string.
Result<std::string> read_file(const std::string& path);
// OK when path names a regular file (following links): what a library that opens the file itself (TLS, YAML) is
// given, since opening a named pipe without a writer would wait forever. InvalidArgument naming it else.
Status check_regular_file(const std::string& path);
// Writes bytes to path, replacing it atomically (write to a temporary, then rename).
Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace tessera
