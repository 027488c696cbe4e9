// amp/policy_table.h — what autocast does to each registered op, read from the op registry
// (each op declares its policy where it is defined: define_op("conv2d").policy(...)).
#pragma once
#include <iosfwd>
#include <string>

namespace mixtape::amp {

// One line per op: "conv2d            lower_precision", plus the CUDA ban where there is one.
// In-place ops are listed as "never (in-place)". Ops added later (your own) appear too.
std::string policy_table_string();
void print_policy_table(std::ostream& os);
void print_policy_table();  // to stdout

}  // namespace mixtape::amp
