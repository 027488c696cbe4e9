// mixtape/mixtape.h — the one header users include: every public layer of mixtape.
#pragma once

#include "core/allocator.h"
#include "core/device.h"
#include "core/dispatcher.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/trace.h"

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/op_node.h"
#include "autograd/gradcheck.h"
#include "autograd/print.h"

#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/indexing.h"
#include "ops/matmul.h"
#include "ops/pointwise.h"
#include "ops/reduce.h"
#include "ops/views.h"
