// examples/svg_plot.h — the examples include the SVG plots by this name; the plots themselves
// live in amp/svg_plot.h, where the library's tensor-statistics logger draws with them too.
#pragma once
#include "amp/svg_plot.h"
