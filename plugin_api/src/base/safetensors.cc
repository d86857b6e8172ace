// safetensors reader and Hugging Face checkpoint directory (layout in sift/safetensors.h).
// The JSON header is parsed with nlohmann::json; every tensor entry is validated against the
// file size before any pointer into the data section is handed out.
#include "sift/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "mapped_file.h"
#include "sift/error.h"

namespace sift {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the limit the reference implementation uses

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  int64_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1},      {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},          {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1}, {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},        {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},      {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},        {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},        {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
};

const DtypeInfo& Info(SafetensorsDtype dtype) {
  for (const DtypeInfo& d : kDtypes) {
    if (d.dtype == dtype) return d;
  }
  throw Error("unknown safetensors dtype");
}

// Parses JSON text, rejecting duplicate keys at depth `key_depth` (nlohmann keeps the last one
// silently otherwise). Throws sift::Error prefixed with `path`.
Json ParseJson(const std::string& path, const char* first, const char* last, int key_depth) {
  std::set<std::string> seen;
  std::string duplicate;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == key_depth && parsed.is_string()) {
      if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(first, last, callback);
  } catch (const Json::exception& e) {
    throw Error(path + ": invalid JSON header: " + e.what());
  }
  SIFT_CHECK(duplicate.empty(), path, ": duplicate key \"", duplicate, "\" in the JSON header");
  return j;
}

uint64_t NonNegativeInt(const std::string& where, const Json& v) {
  SIFT_CHECK(v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0), where,
             " must be a non-negative integer, got ", v.dump());
  return v.get<uint64_t>();
}

// One tensor entry of the header: dtype, shape and data_offsets checked against the data
// section (file bytes [data_offset, file_size)); `data` is left for the caller to set.
SafetensorsTensor ParseTensorEntry(const std::string& path, const std::string& name,
                                   const Json& entry, uint64_t data_offset, uint64_t file_size) {
  const uint64_t data_size = file_size - data_offset;
  const std::string where = path + ": tensor '" + name + "'";
  SIFT_CHECK(entry.is_object(), where, " must be an object");
  SafetensorsTensor t;
  t.name = name;

  auto dtype_it = entry.find("dtype");
  SIFT_CHECK(dtype_it != entry.end() && dtype_it->is_string(), where, ": missing \"dtype\"");
  const std::string dtype = dtype_it->get<std::string>();
  const DtypeInfo* info = nullptr;
  for (const DtypeInfo& d : kDtypes) {
    if (dtype == d.name) info = &d;
  }
  SIFT_CHECK(info != nullptr, where, ": unknown dtype \"", dtype, "\"");
  t.dtype = info->dtype;

  auto shape_it = entry.find("shape");
  SIFT_CHECK(shape_it != entry.end() && shape_it->is_array(), where, ": missing \"shape\" array");
  uint64_t elements = 1;
  for (const Json& d : *shape_it) {
    const uint64_t dim = NonNegativeInt(where + " shape entry", d);
    SIFT_CHECK(dim <= static_cast<uint64_t>(INT64_MAX) &&
                   !__builtin_mul_overflow(elements, dim, &elements),
               where, ": shape ", shape_it->dump(), " is too large");
    t.shape.push_back(static_cast<int64_t>(dim));
  }

  auto off_it = entry.find("data_offsets");
  SIFT_CHECK(off_it != entry.end() && off_it->is_array() && off_it->size() == 2, where,
             ": \"data_offsets\" must be [begin, end]");
  t.begin = NonNegativeInt(where + " data_offsets", (*off_it)[0]);
  t.end = NonNegativeInt(where + " data_offsets", (*off_it)[1]);
  SIFT_CHECK(t.begin <= t.end, where, ": data_offsets [", t.begin, ", ", t.end,
             "] end before they begin");
  SIFT_CHECK(t.end <= data_size, where, ": truncated or bad offsets: data_offsets end at ", t.end,
             " (file offset ", data_offset + t.end, "), but the file is ", file_size, " bytes");
  uint64_t expected = 0;
  SIFT_CHECK(!__builtin_mul_overflow(elements, static_cast<uint64_t>(info->size), &expected) &&
                 expected == t.end - t.begin,
             where, ": data_offsets span ", t.end - t.begin, " bytes, but shape ", shape_it->dump(),
             " of ", dtype, " needs ", expected);
  return t;
}

std::map<std::string, std::string> ParseMetadata(const std::string& path, const Json& entry) {
  SIFT_CHECK(entry.is_object(), path, ": __metadata__ must be an object of strings");
  std::map<std::string, std::string> metadata;
  for (auto m = entry.begin(); m != entry.end(); ++m) {
    SIFT_CHECK(m.value().is_string(), path, ": __metadata__ \"", m.key(),
               "\" must be a string, got ", m.value().dump());
    metadata[m.key()] = m.value().get<std::string>();
  }
  return metadata;
}

}  // namespace

const char* SafetensorsDtypeName(SafetensorsDtype dtype) { return Info(dtype).name; }

int64_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return Info(dtype).size; }

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- SafetensorsFile ------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile() = default;
SafetensorsFile::~SafetensorsFile() = default;

std::unique_ptr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->mapping_ = std::make_unique<MappedFile>(MappedFile::Open(path));
  f->base_ = f->mapping_->data();
  f->size_ = f->mapping_->size();
  f->Parse();
  return f;
}

void SafetensorsFile::Parse() {
  SIFT_CHECK(size_ >= 8, path_,
             ": truncated: need 8 bytes at offset 0 for the header length, "
             "but the file is ",
             size_, " bytes");
  uint64_t header_len;
  std::memcpy(&header_len, base_, 8);
  SIFT_CHECK(header_len <= kMaxHeaderBytes, path_, ": header length ", header_len,
             " is larger than the ", kMaxHeaderBytes, "-byte limit (not a safetensors file?)");
  SIFT_CHECK(header_len <= size_ - 8, path_, ": truncated: the JSON header needs ", header_len,
             " bytes at offset 8, but the file is ", size_, " bytes");
  data_offset_ = 8 + header_len;
  const char* text = reinterpret_cast<const char*>(base_ + 8);
  const Json header = ParseJson(path_, text, text + header_len, /*key_depth=*/1);
  SIFT_CHECK(header.is_object(), path_, ": the JSON header must be an object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& entry = it.value();
    if (name == "__metadata__") {
      metadata_ = ParseMetadata(path_, entry);
      continue;
    }
    SafetensorsTensor t = ParseTensorEntry(path_, name, entry, data_offset_, size_);
    t.data = base_ + data_offset_ + t.begin;
    tensors_.push_back(std::move(t));
  }

  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (i > 0 && tensors_[i].begin < tensors_[i - 1].end) {
      throw Error(detail::Concat(path_, ": tensors '", tensors_[i - 1].name, "' and '",
                                 tensors_[i].name, "' overlap in the data section"));
    }
    index_.emplace(tensors_[i].name, i);
  }
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- HfCheckpoint ---------------------------------------------------------------------------

HfCheckpoint::HfCheckpoint() = default;
HfCheckpoint::~HfCheckpoint() = default;

std::unique_ptr<HfCheckpoint> HfCheckpoint::Open(const std::string& dir) {
  std::unique_ptr<HfCheckpoint> ckpt(new HfCheckpoint());
  ckpt->dir_ = dir;
  const fs::path root(dir);
  std::error_code ec;
  SIFT_CHECK(fs::is_directory(root, ec), dir, ": not a directory");
  ckpt->config_path_ = (root / "config.json").string();
  SIFT_CHECK(fs::is_regular_file(ckpt->config_path_, ec), dir, ": missing config.json");

  const fs::path single = root / "model.safetensors";
  const fs::path index_path = root / "model.safetensors.index.json";
  if (fs::is_regular_file(single, ec)) {
    ckpt->shards_.push_back(SafetensorsFile::Open(single.string()));
    const SafetensorsFile* shard = ckpt->shards_.back().get();
    for (const SafetensorsTensor& t : shard->tensors()) ckpt->index_[t.name] = {&t, shard};
    return ckpt;
  }
  SIFT_CHECK(fs::is_regular_file(index_path, ec), dir,
             ": no model.safetensors or model.safetensors.index.json (only safetensors "
             "checkpoints are supported)");

  const std::string ipath = index_path.string();
  std::ifstream in(ipath, std::ios::binary);
  SIFT_CHECK(in.good(), ipath, ": cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Json index = ParseJson(ipath, text.data(), text.data() + text.size(), /*key_depth=*/2);
  SIFT_CHECK(index.is_object(), ipath, ": must be a JSON object");
  auto map_it = index.find("weight_map");
  SIFT_CHECK(map_it != index.end() && map_it->is_object(), ipath,
             ": missing \"weight_map\" object");

  std::map<std::string, const SafetensorsFile*> opened;
  for (auto it = map_it->begin(); it != map_it->end(); ++it) {
    SIFT_CHECK(it.value().is_string(), ipath, ": weight_map \"", it.key(),
               "\" must name a shard file, got ", it.value().dump());
    const std::string shard_name = it.value().get<std::string>();
    SIFT_CHECK(!shard_name.empty() && shard_name.find('/') == std::string::npos &&
                   shard_name != "." && shard_name != "..",
               ipath, ": weight_map \"", it.key(), "\" names \"", shard_name,
               "\", which is not a plain file name in the checkpoint directory");
    auto shard_it = opened.find(shard_name);
    if (shard_it == opened.end()) {
      const fs::path shard_path = root / shard_name;
      SIFT_CHECK(fs::is_regular_file(shard_path, ec), ipath, ": shard \"", shard_name,
                 "\" (for tensor '", it.key(), "') does not exist");
      ckpt->shards_.push_back(SafetensorsFile::Open(shard_path.string()));
      shard_it = opened.emplace(shard_name, ckpt->shards_.back().get()).first;
    }
    const SafetensorsTensor* t = shard_it->second->Find(it.key());
    SIFT_CHECK(t != nullptr, ipath, ": weight_map puts tensor '", it.key(), "' in \"", shard_name,
               "\", which does not contain it");
    ckpt->index_[it.key()] = {t, shard_it->second};
  }
  return ckpt;
}

std::vector<std::string> HfCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, entry] : index_) names.push_back(name);
  return names;
}

const SafetensorsTensor* HfCheckpoint::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.tensor;
}

const SafetensorsTensor& HfCheckpoint::Get(std::string_view name) const {
  const SafetensorsTensor* t = Find(name);
  SIFT_CHECK(t != nullptr, dir_, ": tensor '", name, "' not found in the checkpoint");
  return *t;
}

const std::string& HfCheckpoint::ShardPathOf(std::string_view name) const {
  auto it = index_.find(name);
  SIFT_CHECK(it != index_.end(), dir_, ": tensor '", name, "' not found in the checkpoint");
  return it->second.shard->path();
}

}  // namespace sift
