// GGUF reader: header, metadata and tensor table parsed from a read-only mapping (the GGUF spec,
// ggml docs/gguf.md). Every read goes through Parser, which checks the remaining length first, so a
// truncated or corrupt file raises sift::Error ("<path>: truncated: ...") instead of reading past
// the end. Values are not copied: GgufValue and GgufTensorInfo point into the mapping.
#include "sift/gguf.h"

#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "mapped_file.h"
#include "sift/error.h"

namespace sift {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr uint32_t kMaxDims = 4;             // GGML_MAX_DIMS
// Smallest possible encodings, used to reject absurd counts before allocating.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, 0 dims, type, offset

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool ValidValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

// Encoded size of a fixed-size value type; 0 for STRING and ARRAY.
uint64_t FixedSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool IsInteger(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool IsFloat(GgufValueType t) {
  return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64;
}

// An integer element decoded without loss: either a signed or an unsigned 64-bit value.
struct IntValue {
  bool is_unsigned;
  uint64_t u;
  int64_t s;
};

IntValue DecodeInt(GgufValueType t, const uint8_t* p) {
  switch (t) {
    case GgufValueType::kUint8:
      return {true, Load<uint8_t>(p), 0};
    case GgufValueType::kUint16:
      return {true, Load<uint16_t>(p), 0};
    case GgufValueType::kUint32:
      return {true, Load<uint32_t>(p), 0};
    case GgufValueType::kUint64:
      return {true, Load<uint64_t>(p), 0};
    case GgufValueType::kInt8:
      return {false, 0, Load<int8_t>(p)};
    case GgufValueType::kInt16:
      return {false, 0, Load<int16_t>(p)};
    case GgufValueType::kInt32:
      return {false, 0, Load<int32_t>(p)};
    case GgufValueType::kInt64:
      return {false, 0, Load<int64_t>(p)};
    default:
      break;
  }
  throw Error(detail::Concat("value of type ", GgufValueTypeName(t), " is not an integer"));
}

int64_t ToInt(GgufValueType t, const uint8_t* p) {
  const IntValue v = DecodeInt(t, p);
  if (!v.is_unsigned) return v.s;
  SIFT_CHECK(v.u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "value ", v.u, " (",
             GgufValueTypeName(t), ") does not fit in int64");
  return static_cast<int64_t>(v.u);
}

uint64_t ToUint(GgufValueType t, const uint8_t* p) {
  const IntValue v = DecodeInt(t, p);
  if (v.is_unsigned) return v.u;
  SIFT_CHECK(v.s >= 0, "value ", v.s, " (", GgufValueTypeName(t), ") is negative");
  return static_cast<uint64_t>(v.s);
}

double ToFloat(GgufValueType t, const uint8_t* p) {
  if (t == GgufValueType::kFloat32) return Load<float>(p);
  if (t == GgufValueType::kFloat64) return Load<double>(p);
  SIFT_CHECK(IsInteger(t), "value of type ", GgufValueTypeName(t), " is not numeric");
  const IntValue v = DecodeInt(t, p);
  return v.is_unsigned ? static_cast<double>(v.u) : static_cast<double>(v.s);
}

std::string_view ToStringView(const uint8_t* p) {
  const uint64_t len = Load<uint64_t>(p);
  return std::string_view(reinterpret_cast<const char*>(p + 8), len);
}

// Appends a printable, shortened rendering of a string.
void AppendQuoted(std::ostringstream& os, std::string_view s, size_t max_chars) {
  os << '"';
  for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      os << '\\' << c;
    } else if (c == '\n') {
      os << "\\n";
    } else if (c < 0x20 || c == 0x7F) {
      static const char kHex[] = "0123456789abcdef";
      os << "\\x" << kHex[c >> 4] << kHex[c & 15];
    } else {
      os << c;
    }
  }
  os << '"';
  if (s.size() > max_chars) os << "... (" << s.size() << " bytes)";
}

void AppendScalar(std::ostringstream& os, GgufValueType t, const uint8_t* p) {
  if (IsInteger(t)) {
    const IntValue v = DecodeInt(t, p);
    if (v.is_unsigned) {
      os << v.u;
    } else {
      os << v.s;
    }
  } else if (IsFloat(t)) {
    os << ToFloat(t, p);
  } else if (t == GgufValueType::kBool) {
    os << (p[0] ? "true" : "false");
  } else if (t == GgufValueType::kString) {
    AppendQuoted(os, ToStringView(p), 64);
  }
}

}  // namespace

// ---- GgufValue ------------------------------------------------------------------------------

const char* GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "UINT8";
    case GgufValueType::kInt8:
      return "INT8";
    case GgufValueType::kUint16:
      return "UINT16";
    case GgufValueType::kInt16:
      return "INT16";
    case GgufValueType::kUint32:
      return "UINT32";
    case GgufValueType::kInt32:
      return "INT32";
    case GgufValueType::kFloat32:
      return "FLOAT32";
    case GgufValueType::kBool:
      return "BOOL";
    case GgufValueType::kString:
      return "STRING";
    case GgufValueType::kArray:
      return "ARRAY";
    case GgufValueType::kUint64:
      return "UINT64";
    case GgufValueType::kInt64:
      return "INT64";
    case GgufValueType::kFloat64:
      return "FLOAT64";
  }
  return "unknown";
}

namespace {
void CheckScalar(GgufValueType t, GgufValueType elem) {
  SIFT_CHECK(t != GgufValueType::kArray, "value is an array of ", GgufValueTypeName(elem),
             ", not a scalar");
}
void CheckArray(GgufValueType t) {
  SIFT_CHECK(t == GgufValueType::kArray, "value is a ", GgufValueTypeName(t), ", not an array");
}
}  // namespace

int64_t GgufValue::AsInt() const {
  CheckScalar(type_, array_type_);
  return ToInt(type_, data_);
}

uint64_t GgufValue::AsUint() const {
  CheckScalar(type_, array_type_);
  return ToUint(type_, data_);
}

double GgufValue::AsFloat() const {
  CheckScalar(type_, array_type_);
  return ToFloat(type_, data_);
}

bool GgufValue::AsBool() const {
  CheckScalar(type_, array_type_);
  SIFT_CHECK(type_ == GgufValueType::kBool, "value of type ", GgufValueTypeName(type_),
             " is not a BOOL");
  return data_[0] != 0;
}

std::string_view GgufValue::AsString() const {
  CheckScalar(type_, array_type_);
  SIFT_CHECK(type_ == GgufValueType::kString, "value of type ", GgufValueTypeName(type_),
             " is not a STRING");
  return ToStringView(data_);
}

std::vector<std::string_view> GgufValue::AsStringArray() const {
  CheckArray(type_);
  SIFT_CHECK(array_type_ == GgufValueType::kString, "array of ", GgufValueTypeName(array_type_),
             " is not an array of STRING");
  std::vector<std::string_view> out;
  out.reserve(array_size_);
  const uint8_t* p = data_;
  for (size_t i = 0; i < array_size_; ++i) {
    out.push_back(ToStringView(p));
    p += 8 + out.back().size();
  }
  return out;
}

std::vector<int64_t> GgufValue::AsIntArray() const {
  CheckArray(type_);
  SIFT_CHECK(IsInteger(array_type_), "array of ", GgufValueTypeName(array_type_),
             " is not an array of integers");
  const uint64_t step = FixedSize(array_type_);
  std::vector<int64_t> out(array_size_);
  for (size_t i = 0; i < array_size_; ++i) out[i] = ToInt(array_type_, data_ + i * step);
  return out;
}

std::vector<double> GgufValue::AsFloatArray() const {
  CheckArray(type_);
  SIFT_CHECK(IsInteger(array_type_) || IsFloat(array_type_), "array of ",
             GgufValueTypeName(array_type_), " is not numeric");
  const uint64_t step = FixedSize(array_type_);
  std::vector<double> out(array_size_);
  for (size_t i = 0; i < array_size_; ++i) out[i] = ToFloat(array_type_, data_ + i * step);
  return out;
}

std::string GgufValue::ToString(size_t max_array_items) const {
  std::ostringstream os;
  if (type_ != GgufValueType::kArray) {
    AppendScalar(os, type_, data_);
    return os.str();
  }
  os << GgufValueTypeName(array_type_) << '[' << array_size_ << "] [";
  const uint8_t* p = data_;
  for (size_t i = 0; i < array_size_ && i < max_array_items; ++i) {
    if (i > 0) os << ", ";
    AppendScalar(os, array_type_, p);
    p += array_type_ == GgufValueType::kString ? 8 + Load<uint64_t>(p) : FixedSize(array_type_);
  }
  if (array_size_ > max_array_items) os << ", ...";
  os << ']';
  return os.str();
}

// ---- GgufTensorInfo -------------------------------------------------------------------------

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::vector<int64_t> GgufTensorInfo::torch_shape() const {
  return std::vector<int64_t>(ne.rbegin(), ne.rend());
}

// ---- Parser ---------------------------------------------------------------------------------

// Bounds-checked cursor over the mapping. Each read names what it reads, so an error can say
// "truncated: need 8 bytes at offset 1234 for the length of metadata key 'x' ...".
class GgufFile::Parser {
 public:
  explicit Parser(GgufFile* file) : f_(file), pos_(0) {}

  void Parse();

 private:
  [[noreturn]] void Fail(const std::string& msg) const { throw Error(f_->path_ + ": " + msg); }

  // Remaining bytes must be at least n; `what` says what is being read.
  void Need(uint64_t n, const std::string& what) const {
    if (n > f_->size_ - pos_) {
      Fail(detail::Concat("truncated: need ", n, " bytes at offset ", pos_, " for ", what,
                          ", but the file is ", f_->size_, " bytes"));
    }
  }
  template <typename T>
  T Read(const std::string& what) {
    Need(sizeof(T), what);
    const T v = Load<T>(f_->base_ + pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::string_view ReadString(const std::string& what) {
    const uint64_t len = Read<uint64_t>("the length of " + what);
    Need(len, detail::Concat("the ", len, " bytes of ", what));
    std::string_view s(reinterpret_cast<const char*>(f_->base_ + pos_), len);
    pos_ += len;
    return s;
  }

  void ParseKeyValue(uint64_t index);
  // Validates one value of type t at pos_ and advances past it.
  void SkipValue(GgufValueType t, const std::string& key, uint64_t element);
  void ParseTensorInfo(uint64_t index);
  void ApplyAlignment();
  void PlaceTensors();

  GgufFile* f_;
  uint64_t pos_;
};

void GgufFile::Parser::Parse() {
  const uint32_t magic = Read<uint32_t>("the magic");
  if (magic != kGgufMagic) {
    char shown[5] = {};
    std::memcpy(shown, f_->base_, 4);
    for (char& c : shown) {
      if (c != 0 && (c < 0x20 || c > 0x7E)) c = '?';
    }
    Fail(detail::Concat("not a GGUF file: bad magic '", shown, "' (0x", std::hex, magic, std::dec,
                        "), expected 'GGUF'"));
  }
  f_->version_ = Read<uint32_t>("the version");
  if (f_->version_ == 1) Fail("GGUF version 1 is not supported (only versions 2 and 3)");
  if (f_->version_ != 2 && f_->version_ != 3) {
    Fail(detail::Concat("unsupported GGUF version ", f_->version_,
                        " (only versions 2 and 3; a big-endian file also shows up here)"));
  }
  const uint64_t n_tensors = Read<uint64_t>("the tensor count");
  const uint64_t n_kv = Read<uint64_t>("the metadata count");
  const uint64_t remaining = f_->size_ - pos_;
  if (n_kv > remaining / kMinKvBytes || n_tensors > remaining / kMinTensorInfoBytes ||
      n_kv * kMinKvBytes + n_tensors * kMinTensorInfoBytes > remaining) {
    Fail(detail::Concat("truncated or corrupt header: ", n_kv, " metadata pairs and ", n_tensors,
                        " tensor infos cannot fit in the remaining ", remaining,
                        " bytes after offset ", pos_));
  }
  f_->kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) ParseKeyValue(i);
  ApplyAlignment();
  f_->tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) ParseTensorInfo(i);
  PlaceTensors();
}

void GgufFile::Parser::ParseKeyValue(uint64_t index) {
  const std::string_view key_view = ReadString(detail::Concat("metadata key #", index));
  std::string key(key_view);
  if (!f_->kv_index_.emplace(key, f_->kv_.size()).second) {
    Fail("duplicate metadata key '" + key + "'");
  }
  const std::string what = "metadata key '" + key + "'";
  const uint32_t raw_type = Read<uint32_t>("the value type of " + what);
  if (!ValidValueType(raw_type)) {
    Fail(detail::Concat(what, " has unknown value type ", raw_type));
  }
  GgufValue value;
  value.type_ = static_cast<GgufValueType>(raw_type);
  if (value.type_ == GgufValueType::kArray) {
    const uint32_t raw_elem = Read<uint32_t>("the array element type of " + what);
    if (raw_elem == static_cast<uint32_t>(GgufValueType::kArray)) {
      Fail(what + " is a nested array (array of arrays), which is not supported");
    }
    if (!ValidValueType(raw_elem)) {
      Fail(detail::Concat(what, " is an array of unknown value type ", raw_elem));
    }
    value.array_type_ = static_cast<GgufValueType>(raw_elem);
    const uint64_t count = Read<uint64_t>("the array length of " + what);
    const uint64_t min_elem =
        value.array_type_ == GgufValueType::kString ? 8 : FixedSize(value.array_type_);
    if (count > (f_->size_ - pos_) / min_elem) {
      Fail(detail::Concat("truncated or corrupt: ", what, " claims ", count, " elements of type ",
                          GgufValueTypeName(value.array_type_), " at offset ", pos_, " but only ",
                          f_->size_ - pos_, " bytes remain"));
    }
    SIFT_CHECK(count <= std::numeric_limits<size_t>::max(), f_->path_, ": array too long");
    value.array_size_ = static_cast<size_t>(count);
    const uint64_t start = pos_;
    value.data_ = f_->base_ + pos_;
    if (value.array_type_ == GgufValueType::kString || value.array_type_ == GgufValueType::kBool) {
      for (uint64_t i = 0; i < count; ++i) SkipValue(value.array_type_, key, i);
    } else {
      Need(count * min_elem, detail::Concat("the ", count, " elements of ", what));
      pos_ += count * min_elem;
    }
    value.bytes_ = static_cast<size_t>(pos_ - start);
  } else {
    const uint64_t start = pos_;
    value.data_ = f_->base_ + pos_;
    SkipValue(value.type_, key, std::numeric_limits<uint64_t>::max());
    value.bytes_ = static_cast<size_t>(pos_ - start);
  }
  f_->kv_.push_back(GgufKeyValue{std::move(key), value});
}

void GgufFile::Parser::SkipValue(GgufValueType t, const std::string& key, uint64_t element) {
  const std::string what =
      element == std::numeric_limits<uint64_t>::max()
          ? "the value of metadata key '" + key + "'"
          : detail::Concat("element ", element, " of metadata key '", key, "'");
  if (t == GgufValueType::kString) {
    ReadString(what);
    return;
  }
  const uint64_t size = FixedSize(t);
  Need(size, what);
  if (t == GgufValueType::kBool && f_->base_[pos_] > 1) {
    Fail(detail::Concat(what, " is a BOOL with invalid byte ", int{f_->base_[pos_]}, " at offset ",
                        pos_, " (must be 0 or 1)"));
  }
  pos_ += size;
}

void GgufFile::Parser::ApplyAlignment() {
  for (const GgufKeyValue& kv : f_->kv_) {
    if (kv.key != "general.alignment") continue;
    uint64_t a = 0;
    try {
      a = kv.value.AsUint();
    } catch (const Error& e) {
      Fail(std::string("general.alignment: ") + e.what());
    }
    if (a == 0 || (a & (a - 1)) != 0) {
      Fail(detail::Concat("general.alignment = ", a, " is not a power of two"));
    }
    f_->alignment_ = a;
  }
}

void GgufFile::Parser::ParseTensorInfo(uint64_t index) {
  GgufTensorInfo info;
  info.name = std::string(ReadString(detail::Concat("the name of tensor #", index)));
  const std::string what = "tensor '" + info.name + "'";
  const uint32_t n_dims = Read<uint32_t>("the dimension count of " + what);
  if (n_dims > kMaxDims) {
    Fail(detail::Concat(what, " has ", n_dims, " dimensions (at most ", kMaxDims, ")"));
  }
  int64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const int64_t ne = Read<int64_t>(detail::Concat("dimension ", d, " of ", what));
    if (ne < 0) Fail(detail::Concat(what, " has negative dimension ", d, " = ", ne));
    if (__builtin_mul_overflow(elements, ne, &elements)) {
      Fail(what + " has too many elements (overflow)");
    }
    info.ne.push_back(ne);
  }
  const uint32_t raw_type = Read<uint32_t>("the ggml type of " + what);
  if (!GgmlTypeKnown(raw_type)) {
    Fail(detail::Concat(what, " has unknown or unsupported ggml type ", raw_type));
  }
  info.type = static_cast<GgmlType>(raw_type);
  info.offset = Read<uint64_t>("the data offset of " + what);

  const int64_t ne0 = info.ne.empty() ? 1 : info.ne[0];
  const int64_t block = GgmlBlockSize(info.type);
  if (ne0 % block != 0) {
    Fail(detail::Concat(what, " has ne[0] = ", ne0, ", not a multiple of the ",
                        GgmlTypeName(info.type), " block size ", block));
  }
  const uint64_t rows = ne0 == 0 ? 0 : static_cast<uint64_t>(elements / ne0);
  const uint64_t row_bytes = GgmlRowBytes(info.type, ne0);
  if (__builtin_mul_overflow(rows, row_bytes, &info.nbytes)) {
    Fail(what + " is too large (byte size overflows)");
  }
  if (!f_->tensor_index_.emplace(info.name, f_->tensors_.size()).second) {
    Fail("duplicate tensor name '" + info.name + "'");
  }
  f_->tensors_.push_back(std::move(info));
}

void GgufFile::Parser::PlaceTensors() {
  const uint64_t a = f_->alignment_;
  const uint64_t padding = (a - pos_ % a) % a;
  f_->data_offset_ = pos_ + padding;
  if (f_->tensors_.empty()) return;
  if (f_->data_offset_ > f_->size_) {
    Fail(detail::Concat("truncated: tensor data should start at offset ", f_->data_offset_,
                        " (tensor infos end at ", pos_, ", aligned to ", a, "), but the file is ",
                        f_->size_, " bytes"));
  }
  const uint64_t data_size = f_->size_ - f_->data_offset_;
  for (GgufTensorInfo& t : f_->tensors_) {
    if (t.offset % a != 0) {
      Fail(detail::Concat("tensor '", t.name, "' data offset ", t.offset,
                          " is not a multiple of the alignment ", a));
    }
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      Fail(detail::Concat("truncated or bad offset: tensor '", t.name, "' data [",
                          f_->data_offset_ + t.offset, ", +", t.nbytes,
                          " bytes) runs past the end of the file (", f_->size_, " bytes)"));
    }
    t.data = f_->base_ + f_->data_offset_ + t.offset;
  }
}

// ---- GgufFile -------------------------------------------------------------------------------

GgufFile::GgufFile() = default;
GgufFile::~GgufFile() = default;

std::unique_ptr<GgufFile> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->mapping_ = std::make_unique<MappedFile>(MappedFile::Open(path));
  file->base_ = file->mapping_->data();
  file->size_ = file->mapping_->size();
  Parser(file.get()).Parse();
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

template <typename F>
auto GgufFile::WithKey(std::string_view key, F&& get) const {
  const GgufValue* v = Find(key);
  SIFT_CHECK(v != nullptr, path_, ": missing metadata key '", key, "'");
  try {
    return get(*v);
  } catch (const Error& e) {
    throw Error(detail::Concat(path_, ": metadata key '", key, "': ", e.what()));
  }
}

std::string GgufFile::GetString(std::string_view key) const {
  return WithKey(key, [](const GgufValue& v) { return std::string(v.AsString()); });
}

std::string GgufFile::GetString(std::string_view key, std::string_view fallback) const {
  return Has(key) ? GetString(key) : std::string(fallback);
}

int64_t GgufFile::GetInt(std::string_view key) const {
  return WithKey(key, [](const GgufValue& v) { return v.AsInt(); });
}

int64_t GgufFile::GetInt(std::string_view key, int64_t fallback) const {
  return Has(key) ? GetInt(key) : fallback;
}

double GgufFile::GetFloat(std::string_view key) const {
  return WithKey(key, [](const GgufValue& v) { return v.AsFloat(); });
}

double GgufFile::GetFloat(std::string_view key, double fallback) const {
  return Has(key) ? GetFloat(key) : fallback;
}

bool GgufFile::GetBool(std::string_view key, bool fallback) const {
  return Has(key) ? WithKey(key, [](const GgufValue& v) { return v.AsBool(); }) : fallback;
}

}  // namespace sift
