// Declaration-only stand-in for Gloo's gloo/common/error.h: ProcessGroupGloo.hpp includes it but
// uses none of its names. See ../../README.md. defines: nothing
#pragma once
