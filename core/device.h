// core/device.h — where a tensor lives: the CPU or one CUDA device.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace mixtape {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

class Device {
 public:
  constexpr Device(DeviceType type = DeviceType::CPU, int index = 0) : type_(type), index_(index) {}
  static constexpr Device CPU() { return Device(DeviceType::CPU, 0); }
  static constexpr Device CUDA(int index = 0) { return Device(DeviceType::CUDA, index); }
  // Parses "cpu", "cuda", "cuda:1"; throws mixtape::Error otherwise.
  static Device parse(const std::string& s);

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  constexpr bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"

 private:
  DeviceType type_;
  int index_;
};

const char* device_type_name(DeviceType t);  // "cpu", "cuda"
std::ostream& operator<<(std::ostream& os, const Device& d);
std::ostream& operator<<(std::ostream& os, DeviceType t);

}  // namespace mixtape
