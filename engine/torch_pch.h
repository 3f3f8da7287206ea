// Precompiled header for every LibTorch translation unit (engine, CLI, tests): the heavy LibTorch
// headers parsed once. Never include this from engine/config, engine/planner or the studio UI.
#pragma once

#include <torch/torch.h>
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
