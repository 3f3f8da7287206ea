# Finds LibTorch: a user's own (-DTorch_DIR=...) first, else the wheel in the cached venv that
# `make deps` fills (or a python with torch, as on the H100 hosts), via torch.utils.cmake_prefix_path.
# Then decides whether the CUDA kernels build: ODYSSEY_CUDA=AUTO|ON|OFF -> ODYSSEY_CUDA_ENABLED.

set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "GPU architectures for LibTorch's CUDA flags (Hopper)")
set(ODYSSEY_CUDA_ARCHITECTURES "90" CACHE STRING "CUDA_ARCHITECTURES of Odyssey's own CUDA targets")

# ODYSSEY_TORCH_PYTHON_USED: the Python whose wheel provides LibTorch (cached; the tests run its
# torchrun). With a user's own Torch_DIR it is found only if some candidate's wheel is that LibTorch.
if(NOT Torch_DIR OR NOT DEFINED CACHE{ODYSSEY_TORCH_PYTHON_USED})
  set(_odyssey_pythons)
  if(ODYSSEY_TORCH_PYTHON)
    list(APPEND _odyssey_pythons "${ODYSSEY_TORCH_PYTHON}")
  endif()
  list(APPEND _odyssey_pythons "${ODYSSEY_DEPS_DIR}/venv/bin/python" python3)
  set(_odyssey_python_found "")
  foreach(_py IN LISTS _odyssey_pythons)
    execute_process(COMMAND "${_py}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE _prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                    ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND EXISTS "${_prefix}/Torch/TorchConfig.cmake")
      if(NOT Torch_DIR)
        list(APPEND CMAKE_PREFIX_PATH "${_prefix}")
        set(_odyssey_python_found "${_py}")
        break()
      endif()
      get_filename_component(_wheel_dir "${_prefix}/Torch" REALPATH)
      get_filename_component(_user_dir "${Torch_DIR}" REALPATH)
      if(_wheel_dir STREQUAL _user_dir)
        set(_odyssey_python_found "${_py}")
        break()
      endif()
    endif()
  endforeach()
  set(ODYSSEY_TORCH_PYTHON_USED "${_odyssey_python_found}" CACHE INTERNAL "Python of the LibTorch wheel")
endif()

# find_package(Torch) on a CUDA build of LibTorch enables CUDA itself and needs a toolkit.
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR "odyssey: LibTorch not found. Run `make deps` (installs torch==2.11.0 into "
                      "${ODYSSEY_DEPS_DIR}/venv), or pass -DTorch_DIR=<libtorch>/share/cmake/Torch.")
endif()
get_filename_component(ODYSSEY_TORCH_PREFIX "${TORCH_INCLUDE_DIRS}" DIRECTORY)
list(GET TORCH_INCLUDE_DIRS 0 _torch_inc)
get_filename_component(ODYSSEY_TORCH_PREFIX "${_torch_inc}" DIRECTORY)
if(Torch_VERSION VERSION_LESS 2.11)
  message(FATAL_ERROR "odyssey: LibTorch ${Torch_VERSION} found at ${ODYSSEY_TORCH_PREFIX}; 2.11 or newer is required")
endif()

# Which CUDA the LibTorch build carries, against the local toolkit.
set(ODYSSEY_TORCH_CUDA_MAJOR "")
if(EXISTS "${_torch_inc}/ATen/cuda/CUDAConfig.h" AND TARGET torch_cuda)
  set(ODYSSEY_TORCH_HAS_CUDA ON)
  if(CUDAToolkit_VERSION_MAJOR)
    set(ODYSSEY_TORCH_CUDA_MAJOR "${CUDAToolkit_VERSION_MAJOR}")
  endif()
else()
  set(ODYSSEY_TORCH_HAS_CUDA OFF)
endif()
if(ODYSSEY_TORCH_PYTHON_USED)
  execute_process(COMMAND "${ODYSSEY_TORCH_PYTHON_USED}" -c
                  "import torch; print((torch.version.cuda or '').split('.')[0])"
                  OUTPUT_VARIABLE _wheel_cuda OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(ODYSSEY_TORCH_CUDA_MAJOR "${_wheel_cuda}")
endif()

include(CheckLanguage)
check_language(CUDA)
set(ODYSSEY_CUDA_ENABLED OFF)
set(ODYSSEY_CUDA_LINKED OFF)  # kernels linked into the engine (needs matching CUDA majors)
if(NOT ODYSSEY_CUDA STREQUAL "OFF")
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(ODYSSEY_CUDA_ENABLED ON)
    if(ODYSSEY_TORCH_HAS_CUDA)
      string(REGEX MATCH "^[0-9]+" _nvcc_major "${CMAKE_CUDA_COMPILER_VERSION}")
      if(ODYSSEY_TORCH_CUDA_MAJOR AND NOT ODYSSEY_TORCH_CUDA_MAJOR STREQUAL _nvcc_major)
        message(STATUS "odyssey: LibTorch carries CUDA ${ODYSSEY_TORCH_CUDA_MAJOR}, nvcc is CUDA "
                       "${_nvcc_major}: the kernels compile but are not linked "
                       "into the engine")
      else()
        set(ODYSSEY_CUDA_LINKED ON)
      endif()
    endif()
  elseif(ODYSSEY_CUDA STREQUAL "ON")
    message(FATAL_ERROR "odyssey: ODYSSEY_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
