// core/attrs.h — the non-tensor arguments of an op call (dims, flags, scalars, dtypes), by
// name. Named so the tape and traces can print them and backward formulas can read them.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <ostream>
#include <utility>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace mixtape {

using AttrValue = std::variant<int64_t, double, bool, IntList, DType>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const char*, AttrValue>> il) : items_(il) {}

  Attrs& set(const char* name, AttrValue v) {
    for (auto& [n, val] : items_)
      if (std::strcmp(n, name) == 0) {
        val = std::move(v);
        return *this;
      }
    items_.emplace_back(name, std::move(v));
    return *this;
  }
  bool has(const char* name) const { return find(name) != nullptr; }
  void erase(const char* name) {
    for (auto it = items_.begin(); it != items_.end(); ++it)
      if (std::strcmp(it->first, name) == 0) {
        items_.erase(it);
        return;
      }
  }

  template <typename T>
  const T& get(const char* name) const {
    const AttrValue* v = find(name);
    MT_CHECK(v != nullptr, "attrs: missing attribute '", name, "'");
    const T* p = std::get_if<T>(v);
    MT_CHECK(p != nullptr, "attrs: attribute '", name, "' has another type");
    return *p;
  }
  template <typename T>
  T get_or(const char* name, T fallback) const {
    const AttrValue* v = find(name);
    return v ? std::get<T>(*v) : fallback;
  }
  std::optional<DType> get_dtype(const char* name) const {
    const AttrValue* v = find(name);
    return v ? std::optional<DType>(std::get<DType>(*v)) : std::nullopt;
  }
  const std::vector<std::pair<const char*, AttrValue>>& items() const { return items_; }

 private:
  const AttrValue* find(const char* name) const {
    for (auto& [n, v] : items_)
      if (std::strcmp(n, name) == 0) return &v;
    return nullptr;
  }
  std::vector<std::pair<const char*, AttrValue>> items_;
};

std::ostream& operator<<(std::ostream& os, const Attrs& a);  // "dim=1, keepdim=true"

}  // namespace mixtape
