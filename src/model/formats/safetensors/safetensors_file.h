// safetensors: parse and write the container (Hugging Face's weight file format).
//
// Layout: uint64 little-endian header length N, N bytes of JSON mapping each tensor name to {"dtype",
// "shape", "data_offsets": [begin, end]} (offsets relative to the byte after the header) plus an optional
// "__metadata__" object of strings, then the data. parse_safetensors() checks the header length against
// the file, every offset against the data section and every byte count against dtype x shape, so a
// corrupt header is an InvalidArgument, never an out-of-bounds read. Supported dtypes: F32, F16, BF16.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace tessera::model {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major, as stored
  const uint8_t* data = nullptr;
  size_t bytes = 0;
};

struct SafetensorsContents {
  std::vector<SafetensorsTensor> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

Result<SafetensorsContents> parse_safetensors(std::span<const uint8_t> bytes, const std::string& name);

// Writes tensors (F32/F16/BF16) packed in the given order; the header is padded with spaces to 8 bytes.
Status write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace tessera::model
