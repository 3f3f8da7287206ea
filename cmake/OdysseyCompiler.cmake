# Compiler settings shared by every Odyssey target: ccache, warnings, and a helper that applies them.
# defines: odyssey_target_defaults(target)

find_program(ODYSSEY_CCACHE ccache)
if(ODYSSEY_CCACHE)
  # Precompiled headers need these sloppiness flags to be cacheable.
  set(_ccache_launcher ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}"
      ${ODYSSEY_CCACHE})
  set(CMAKE_C_COMPILER_LAUNCHER ${_ccache_launcher})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_ccache_launcher})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${ODYSSEY_CCACHE})
endif()

if(CMAKE_BUILD_TYPE STREQUAL "Release")
  # -O2 without debug info keeps links fast on 2 cores; the engine is dominated by LibTorch kernels.
  set(CMAKE_CXX_FLAGS_RELEASE "-O2 -DNDEBUG")
endif()

function(odyssey_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)
  target_include_directories(${target} PUBLIC ${CMAKE_SOURCE_DIR})
endfunction()
