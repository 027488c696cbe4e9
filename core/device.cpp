// core/device.cpp — device names and parsing.
#include "core/device.h"

#include "core/error.h"

namespace mixtape {

const char* device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index_);
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return CPU();
  if (s == "cuda") return CUDA(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.find_first_not_of("0123456789", 5) == std::string::npos &&
      s.size() < 9)
    return CUDA(std::stoi(s.substr(5)));
  MT_ERROR("Device::parse: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"", s, "\"");
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }
std::ostream& operator<<(std::ostream& os, DeviceType t) { return os << device_type_name(t); }

}  // namespace mixtape
