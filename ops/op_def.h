// ops/op_def.h — what an op definition file includes: the registry and layers (core), the
// backward context (autograd), and the public op declarations it may use in its backward.
#pragma once
#include "autograd/backward_context.h"
#include "autograd/grad_mode.h"
#include "core/dispatcher.h"
#include "ops/activation.h"
#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/indexing.h"
#include "ops/pointwise.h"
#include "ops/reduce.h"
#include "ops/views.h"
