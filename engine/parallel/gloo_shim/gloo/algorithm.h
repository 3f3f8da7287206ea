// Declaration-only stand-in for Gloo's gloo/algorithm.h: ProcessGroupGloo.hpp includes it but
// uses none of its names. See ../README.md. defines: nothing
#pragma once
