# Build settings of engine/parallel that the engine's source glob cannot express; included from
# engine/CMakeLists.txt after odyssey_engine exists. defines: nothing (sets source properties)
#
# gloo_backend.cpp: the only TU that includes ProcessGroupGloo.hpp, against our declaration-only
# Gloo headers (gloo_shim/, see docs/gloo.md); no precompiled header, so USE_C10D_GLOO and the
# shim path apply to this file alone.
set(_odyssey_parallel ${CMAKE_CURRENT_SOURCE_DIR}/parallel)
set_source_files_properties(${_odyssey_parallel}/gloo_backend.cpp PROPERTIES
  INCLUDE_DIRECTORIES ${_odyssey_parallel}/gloo_shim
  SKIP_PRECOMPILE_HEADERS ON)

# nccl_backend.cpp: ProcessGroupNCCL.hpp needs -DUSE_C10D_NCCL and nccl.h, which the PyPI wheel
# installs as site-packages/nvidia/nccl/include/nccl.h (next to torch/). Only when LibTorch has CUDA.
set(_odyssey_nccl_defs "")
if(TARGET torch_cuda)
  get_filename_component(_odyssey_site_packages "${TORCH_INSTALL_PREFIX}" DIRECTORY)
  find_path(ODYSSEY_NCCL_INCLUDE_DIR nccl.h
            HINTS ${_odyssey_site_packages}/nvidia/nccl/include ${CUDAToolkit_INCLUDE_DIRS}
            DOC "Directory holding nccl.h (the wheel's nvidia/nccl/include)")
  if(ODYSSEY_NCCL_INCLUDE_DIR)
    set_source_files_properties(${_odyssey_parallel}/nccl_backend.cpp PROPERTIES
      INCLUDE_DIRECTORIES ${ODYSSEY_NCCL_INCLUDE_DIR}
      COMPILE_DEFINITIONS "USE_C10D_NCCL=1;ODYSSEY_WITH_NCCL=1"
      SKIP_PRECOMPILE_HEADERS ON)
    message(STATUS "odyssey: NCCL process groups on, nccl.h in ${ODYSSEY_NCCL_INCLUDE_DIR}")
  else()
    message(STATUS "odyssey: LibTorch has CUDA but nccl.h was not found: NcclComm is off")
  endif()
endif()
