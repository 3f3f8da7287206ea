// The Catch2 main shared by every test executable (compiled once as an object library).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
