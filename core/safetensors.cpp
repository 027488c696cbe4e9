// core/safetensors.cpp — the safetensors writer and its validating reader (format and invariant
// in core/safetensors.h). The reader trusts nothing in the file: every length, offset and shape
// is checked with overflow-safe arithmetic before a byte is copied.
#include "core/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

namespace mixtape {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host would need byte swapping");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
constexpr int kMaxJsonDepth = 32;  // the format needs 3 (root > entry > shape); no file needs 32

// A string from the header (a tensor name, a metadata key, a dtype) as an error shows it: with
// JSON's escapes, so a control character stays visible and, above all, a NUL (\u0000 in the
// header) cannot end the message early: what() is a C string, and the location after the name
// was lost (found by tests/fuzz/fuzz_safetensors, regression nul-in-tensor-name).
std::string shown(const std::string& s) {
  const std::string j = nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return j.substr(1, j.size() - 2);  // without the quotes: the messages put their own
}

struct DtypeName {
  DType dtype;
  const char* name;
};
constexpr DtypeName kDtypeNames[] = {
    {DType::Float64, "F64"}, {DType::Float32, "F32"}, {DType::Float16, "F16"}, {DType::BFloat16, "BF16"},
    {DType::Int64, "I64"},   {DType::Int32, "I32"},   {DType::UInt8, "U8"},    {DType::Bool, "BOOL"},
    // The names the safetensors format gives PyTorch's float8_e4m3fn / float8_e5m2.
    {DType::Float8_e4m3fn, "F8_E4M3"}, {DType::Float8_e5m2, "F8_E5M2"},
};

bool dtype_from_name(const std::string& s, DType* out) {
  for (const auto& d : kDtypeNames)
    if (s == d.name) {
      *out = d.dtype;
      return true;
    }
  return false;
}

// Copies the elements of a CPU tensor of any strides to `dst`, row-major.
void copy_row_major(const Tensor& t, char* dst) {
  const size_t es = t.element_size();
  const int64_t n = t.numel();
  if (n == 0) return;
  const char* base = static_cast<const char*>(t.data_ptr());
  if (t.is_contiguous()) {
    std::memcpy(dst, base, static_cast<size_t>(n) * es);
    return;
  }
  const int64_t nd = t.dim();
  std::vector<int64_t> idx(static_cast<size_t>(nd), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < nd; ++d) off += idx[d] * t.stride(d);
    std::memcpy(dst + i * static_cast<int64_t>(es), base + off * static_cast<int64_t>(es), es);
    for (int64_t d = nd - 1; d >= 0; --d) {  // odometer increment
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
}

void write_u64_le(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDtypeNames)
    if (d.dtype == t) return d.name;
  MT_ERROR("safetensors: dtype ", dtype_name(t), " has no safetensors name");
}

// ---------------------------------------------------------------------------------- writing

namespace {

// Writes the file `file` (nothing else: no temporary, no rename); errors name `path`, the file
// the caller is saving, and `file` where the write itself fails.
void write_file(const StateDict& state, const std::string& path, const std::string& file,
                const SafetensorsMetadata& metadata) {
  struct Entry {
    const std::string* name;
    const Tensor* t;
  };
  std::vector<Entry> entries;
  for (const auto& [name, t] : state) {
    MT_CHECK(!name.empty(), "save_safetensors: ", path, ": a tensor has an empty name");
    MT_CHECK(name != "__metadata__", "save_safetensors: ", path, ": '__metadata__' is reserved, not a tensor name");
    MT_CHECK(t.defined(), "save_safetensors: ", path, ": tensor '", name, "' is undefined");
    MT_CHECK(t.device().is_cpu(), "save_safetensors: ", path, ": tensor '", name, "' is on ", t.device(),
             "; move it to the CPU first (Module::save does)");
    entries.push_back({&name, &t});
  }
  // Widest dtype first, then by name: every tensor starts at a multiple of its itemsize.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.t->element_size() != b.t->element_size()) return a.t->element_size() > b.t->element_size();
    return *a.name < *b.name;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) md[k] = v;
    header["__metadata__"] = std::move(md);
  }
  uint64_t offset = 0;
  for (const auto& e : entries) {
    nlohmann::ordered_json info;
    info["dtype"] = safetensors_dtype_name(e.t->dtype());
    info["shape"] = nlohmann::ordered_json::array();
    for (int64_t s : e.t->sizes()) info["shape"].push_back(s);
    info["data_offsets"] = {offset, offset + e.t->nbytes()};
    header[*e.name] = std::move(info);
    offset += e.t->nbytes();
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& ex) {  // a name or metadata string that is not UTF-8
    MT_ERROR("save_safetensors: ", path, ": cannot encode the header: ", ex.what());
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // the reference writer's padding

  std::string prefix;
  write_u64_le(prefix, json.size());
  {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    MT_CHECK(f.is_open(), "save_safetensors: cannot open ", file, " for writing: ", std::strerror(errno));
    f.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
    f.write(json.data(), static_cast<std::streamsize>(json.size()));
    std::vector<char> buf;
    for (const auto& e : entries) {
      buf.resize(e.t->nbytes());
      copy_row_major(*e.t, buf.data());
      f.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    }
    f.flush();
    if (!f.good()) {
      f.close();
      std::remove(file.c_str());
      MT_ERROR("save_safetensors: writing ", file, " failed (disk full?)");
    }
  }
}

}  // namespace

void write_safetensors_file(const StateDict& state, const std::string& path, const SafetensorsMetadata& metadata) {
  write_file(state, path, path, metadata);
}

void save_safetensors(const StateDict& state, const std::string& path, const SafetensorsMetadata& metadata) {
  const std::string tmp = path + ".tmp";
  write_file(state, path, tmp, metadata);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    MT_ERROR("save_safetensors: cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
}

// ---------------------------------------------------------------------------------- reading

StateDict parse_safetensors(const void* data, size_t size, const std::string& what, SafetensorsMetadata* metadata) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  const char* op = "load_safetensors: ";
  MT_CHECK(size >= 8, op, what, ": file is ", size, " bytes, too short for the 8-byte header length at byte 0");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  MT_CHECK(n <= size - 8, op, what, ": header length ", n, " (bytes 0-7) runs past the end of the file (",
           size - 8, " bytes follow the length)");
  MT_CHECK(n <= kMaxHeaderBytes, op, what, ": header length ", n, " (bytes 0-7) exceeds the limit of ",
           kMaxHeaderBytes, " bytes");
  MT_CHECK(n >= 2 && bytes[8] == '{', op, what, ": header at byte 8 does not start with '{' (not a safetensors file?)");
  const uint64_t data_start = 8 + n;             // file offset of the data section
  const uint64_t data_size = size - data_start;  // bytes in the data section

  // Parse, refusing duplicate tensor names and nesting deeper than the format needs.
  std::set<std::string> seen;
  std::string duplicate;
  bool too_deep = false;
  nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (depth > kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    if (ev == nlohmann::json::parse_event_t::key && depth == 1) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + data_start, cb);
  } catch (const nlohmann::json::parse_error& ex) {
    MT_ERROR(op, what, ": header is not valid JSON (near file byte ", 8 + (ex.byte > 0 ? ex.byte - 1 : 0), "): ",
             ex.what());
  } catch (const nlohmann::json::exception& ex) {
    // Not a syntax error but still the header's fault, e.g. a number like 5e9223 that
    // overflows a double (out_of_range 406; found by tests/fuzz/fuzz_safetensors).
    MT_ERROR(op, what, ": header JSON cannot be read (bytes 8-", data_start - 1, "): ", ex.what());
  }
  MT_CHECK(!too_deep, op, what, ": header JSON is nested deeper than the format allows (", kMaxJsonDepth,
           " levels) at bytes 8-", data_start - 1);
  MT_CHECK(header.is_object(), op, what, ": header at byte 8 is not a JSON object");
  MT_CHECK(duplicate.empty(), op, what, ": tensor '", shown(duplicate), "' appears twice in the header (bytes 8-",
           data_start - 1, ")");

  struct Info {
    std::string name;
    DType dtype;
    IntList shape;
    uint64_t begin, end;
  };
  std::vector<Info> infos;
  if (metadata) metadata->clear();
  // The DOM keeps no positions, so entry errors name the header's byte range.
  const std::string in_header = detail::str_cat(" (header entry in bytes 8-", data_start - 1, ")");
  for (const auto& item : header.items()) {
    const std::string& name = item.key();  // not a structured binding: lambdas below capture it
    const auto& v = item.value();
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      MT_CHECK(v.is_object(), op, what, ": '__metadata__' must be an object of strings, got ", v.type_name(),
               in_header);
      for (const auto& [k, s] : v.items()) {
        MT_CHECK(s.is_string(), op, what, ": '__metadata__' value '", shown(k), "' must be a string, got ",
                 s.type_name(), in_header);
        if (metadata) (*metadata)[k] = s.get<std::string>();
      }
      continue;
    }
    auto where = [&] { return detail::str_cat(op, what, ": tensor '", shown(name), "'", in_header, ": "); };
    MT_CHECK(v.is_object(), where(), "header entry must be an object, got ", v.type_name());
    for (const char* key : {"dtype", "shape", "data_offsets"})
      MT_CHECK(v.contains(key), where(), "header entry has no \"", key, "\"");
    const auto& jd = v["dtype"];
    const auto& js = v["shape"];
    const auto& jo = v["data_offsets"];
    MT_CHECK(jd.is_string(), where(), "\"dtype\" must be a string, got ", jd.type_name());
    Info info{name, DType::Float32, {}, 0, 0};
    MT_CHECK(dtype_from_name(jd.get<std::string>(), &info.dtype), where(), "unsupported dtype \"",
             shown(jd.get<std::string>()), "\" (mixtape reads F64, F32, F16, BF16, I64, I32, U8, BOOL)");
    MT_CHECK(js.is_array(), where(), "\"shape\" must be an array, got ", js.type_name());
    // numel * itemsize with every factor and partial product checked (a zero dim does not
    // excuse a product of the other dims that overflows int64, as in the reference reader).
    uint64_t nonzero_product = 1;
    bool has_zero = false;
    for (const auto& d : js) {
      MT_CHECK(d.is_number_unsigned(), where(), "shape ", js.dump(), " must hold non-negative integers");
      uint64_t s = d.get<uint64_t>();
      MT_CHECK(s <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), where(), "shape ", js.dump(),
               " has a dimension too large");
      if (s == 0) has_zero = true;
      uint64_t p = 0;
      MT_CHECK(!__builtin_mul_overflow(nonzero_product, std::max<uint64_t>(s, 1), &p) &&
                   p <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
               where(), "shape ", js.dump(), " has more elements than int64 can count");
      nonzero_product = p;
      info.shape.push_back(static_cast<int64_t>(s));
    }
    const uint64_t numel = has_zero ? 0 : nonzero_product;
    uint64_t nbytes = 0;
    MT_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(element_size(info.dtype)), &nbytes), where(),
             "shape ", js.dump(), " of ", jd.get<std::string>(), " overflows the byte count");
    MT_CHECK(jo.is_array() && jo.size() == 2 && jo[0].is_number_unsigned() && jo[1].is_number_unsigned(), where(),
             "\"data_offsets\" must be [begin, end] with non-negative integers, got ", jo.dump());
    info.begin = jo[0].get<uint64_t>();
    info.end = jo[1].get<uint64_t>();
    MT_CHECK(info.begin <= info.end, where(), "data_offsets [", info.begin, ", ", info.end, "] end before they begin");
    MT_CHECK(info.end <= data_size, where(), "data_offsets [", info.begin, ", ", info.end, "] run past the end of ",
             "the file: data is bytes ", data_start, "-", size, " (", data_size, " bytes), the tensor would end at file byte ",
             data_start + std::min<uint64_t>(info.end, std::numeric_limits<uint64_t>::max() - data_start));
    MT_CHECK(info.end - info.begin == nbytes, where(), "data_offsets [", info.begin, ", ", info.end, "] hold ",
             info.end - info.begin, " bytes but shape ", js.dump(), " of ", jd.get<std::string>(), " needs ", nbytes,
             " (at file byte ", data_start + info.begin, ")");
    infos.push_back(std::move(info));
  }

  // The tensors must tile the data section exactly: sorted by offset, each begins where the
  // previous one ended, the first at 0 and the last at the end of the file.
  std::vector<const Info*> order;
  for (const auto& i : infos) order.push_back(&i);
  std::sort(order.begin(), order.end(), [](const Info* a, const Info* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expect = 0;
  const Info* prev = nullptr;
  for (const Info* i : order) {
    if (i->begin < expect)
      MT_ERROR(op, what, ": tensor '", shown(i->name), "' (data_offsets [", i->begin, ", ", i->end,
               "]) overlaps tensor '", shown(prev->name), "' (ending at ", expect, "), at file byte ",
               data_start + i->begin);
    if (i->begin > expect)
      MT_ERROR(op, what, ": tensor '", shown(i->name), "' (data_offsets [", i->begin, ", ", i->end,
               "]) leaves a gap of ", i->begin - expect, " unowned bytes before it, at file byte ",
               data_start + expect);
    expect = i->end;
    prev = i;
  }
  MT_CHECK(expect == data_size, op, what, ": ", data_size - expect, " bytes at the end of the file (from file byte ",
           data_start + expect, ") belong to no tensor");

  StateDict out;
  for (const auto& i : infos) {
    const unsigned char* src = bytes + data_start + i.begin;
    const size_t nb = static_cast<size_t>(i.end - i.begin);
    if (i.dtype == DType::Bool) {  // any byte other than 0/1 would be an invalid C++ bool
      for (size_t k = 0; k < nb; ++k)
        MT_CHECK(src[k] <= 1, op, what, ": tensor '", shown(i.name), "': BOOL byte ", int(src[k]),
                 " is neither 0 nor 1, at file byte ", data_start + i.begin + k);
    }
    Tensor t = Tensor::empty(i.shape, TensorOptions(i.dtype));
    if (nb) std::memcpy(t.data_ptr(), src, nb);
    out.emplace(i.name, std::move(t));
  }
  return out;
}

StateDict load_safetensors(const std::string& path, SafetensorsMetadata* metadata) {
  std::ifstream f(path, std::ios::binary);
  MT_CHECK(f.is_open(), "load_safetensors: cannot open ", path, ": ", std::strerror(errno));
  f.seekg(0, std::ios::end);
  const std::streamoff end = f.tellg();
  MT_CHECK(end >= 0, "load_safetensors: cannot determine the size of ", path);
  f.seekg(0, std::ios::beg);
  std::vector<char> buf(static_cast<size_t>(end));
  if (!buf.empty()) f.read(buf.data(), end);
  MT_CHECK(f.good() || buf.empty(), "load_safetensors: reading ", path, " failed after ", f.gcount(), " of ", end,
           " bytes");
  return parse_safetensors(buf.data(), buf.size(), path, metadata);
}

}  // namespace mixtape
