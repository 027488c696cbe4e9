// amp/policy_table.cpp — see amp/policy_table.h.
#include "amp/policy_table.h"

#include <iomanip>
#include <iostream>
#include <sstream>

#include "core/dispatcher.h"

namespace mixtape::amp {

std::string policy_table_string() {
  std::ostringstream os;
  os << std::left << std::setw(36) << "op" << "autocast policy\n";
  for (const OpSchema* op : all_ops()) {
    os << std::setw(36) << op->name;
    if (op->inplace)
      os << "never (in-place)";
    else
      os << amp_policy_name(op->amp_policy);
    if (!op->cuda_autocast_ban.empty()) os << "; banned under CUDA autocast";
    os << '\n';
  }
  return os.str();
}

void print_policy_table(std::ostream& os) { os << policy_table_string(); }
void print_policy_table() { print_policy_table(std::cout); }

}  // namespace mixtape::amp
