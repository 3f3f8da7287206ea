# Locates the header-only/system dependencies: toml++ (used header-only in one file), nlohmann-json
# (engine/util/json*, Debian's nlohmann-json3-dev), Catch2 2.x,
# and, for the studio, Dear ImGui (libimgui.a with its backends), stb, GLFW 3 and OpenGL.

list(APPEND CMAKE_PREFIX_PATH "${ODYSSEY_THIRD_PARTY_PREFIX}")

find_path(ODYSSEY_TOMLPP_INCLUDE toml++/toml.h
          HINTS "${ODYSSEY_THIRD_PARTY_PREFIX}/include" REQUIRED)
add_library(odyssey_tomlplusplus INTERFACE)
target_include_directories(odyssey_tomlplusplus SYSTEM INTERFACE "${ODYSSEY_TOMLPP_INCLUDE}")
target_compile_definitions(odyssey_tomlplusplus INTERFACE TOML_HEADER_ONLY=1 TOML_EXCEPTIONS=1)

find_package(nlohmann_json 3.11 CONFIG REQUIRED)  # installed by `make deps`

if(ODYSSEY_TESTS)
  find_package(Catch2 2 CONFIG QUIET)
  if(Catch2_FOUND)
    include(Catch)
  else()
    find_path(ODYSSEY_CATCH2_INCLUDE catch2/catch.hpp HINTS "${ODYSSEY_THIRD_PARTY_PREFIX}/include" REQUIRED)
    add_library(Catch2::Catch2 INTERFACE IMPORTED)
    target_include_directories(Catch2::Catch2 INTERFACE "${ODYSSEY_CATCH2_INCLUDE}")
    set(ODYSSEY_CATCH_NO_DISCOVER ON)
  endif()
endif()

if(ODYSSEY_STUDIO)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(ODYSSEY_IMGUI QUIET IMPORTED_TARGET imgui stb)
    pkg_check_modules(ODYSSEY_GLFW QUIET IMPORTED_TARGET glfw3)
  endif()
  set(OpenGL_GL_PREFERENCE GLVND)
  find_package(OpenGL QUIET)
  if(NOT ODYSSEY_IMGUI_FOUND OR NOT ODYSSEY_GLFW_FOUND OR NOT OpenGL_FOUND)
    message(WARNING "odyssey: Dear ImGui, GLFW or OpenGL not found; building without odyssey-studio "
                    "(run `make deps`, or pass -DODYSSEY_STUDIO=OFF to silence this)")
    set(ODYSSEY_STUDIO OFF CACHE BOOL "" FORCE)
  endif()
endif()
