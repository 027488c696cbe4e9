// ops/threads.h — how many CPU threads kernels use (OpenMP loops and OpenBLAS together, so
// the two pools never oversubscribe the machine). Results are bit-identical for a fixed count.
#pragma once

namespace mixtape {

void set_num_threads(int n);
int get_num_threads();

}  // namespace mixtape
