// Anchors the engine library so it always has a translation unit that builds the precompiled
// header first; it defines nothing else.
#include "engine/torch_pch.h"
