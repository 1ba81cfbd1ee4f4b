# cmake/NaAccel.cmake — find the accelerator toolkits (NA_CUDA, NA_XRT).
#
# Sets NA_HAVE_CUDA / NA_HAVE_XRT (0/1) and, when found, adds the compile
# definitions of the same name to every target. The CUDA language is enabled
# only when the toolkit is found (NA_CUDA AUTO or ON): a machine without it
# builds everything else (kernels/cuda/ is then left out).

# How the search for a toolkit ended (option NA_CUDA or NA_XRT, found 0/1):
# found, its line; not found, an error when the option is ON (it is
# required), else a line saying what is left out.
function(na_accel_found option found found_msg missing_msg off_msg)
  if(found)
    message(STATUS "nearattn: ${found_msg}")
  elseif(${option} STREQUAL "ON")
    message(FATAL_ERROR "${option}=ON but ${missing_msg}")
  else()
    message(STATUS "nearattn: ${off_msg}")
  endif()
endfunction()

# CUDA: the toolkit's runtime and cuBLAS. NCCL is not looked for: the module
# loads it on demand (kernels/cuda/cuda_tp.c).
set(NA_HAVE_CUDA 0)
if(NOT NA_CUDA STREQUAL "OFF")
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cudart AND TARGET CUDA::cublas)
    set(NA_HAVE_CUDA 1)
    # The CUDA language is enabled only here, when the toolkit is found: the
    # kernels (kernels/cuda/*.cu) compile for sm_90 (H100/H200) plus the
    # compute_90 PTX, which later GPUs JIT ("90" = 90-real + 90-virtual).
    if(NOT CMAKE_CUDA_COMPILER AND EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}")
      set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
    endif()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)   # libcudart.so, as CUDA::cudart
    enable_language(CUDA)
  endif()
  na_accel_found(NA_CUDA ${NA_HAVE_CUDA}
    "CUDA ${CUDAToolkit_VERSION} found (${CUDAToolkit_LIBRARY_DIR}, \
architectures ${CMAKE_CUDA_ARCHITECTURES}; NCCL loaded at run time)"
    "no CUDA toolkit with cudart and cuBLAS was found (set CUDAToolkit_ROOT, or NA_CUDA=OFF)"
    "CUDA toolkit not found, CUDA backend off")
endif()

# The storage nodes' GPU attention engine (common/engines.c: engine "cuda")
# is built with the CUDA backend.
add_compile_definitions(NA_HAVE_CUDA_ENGINE=${NA_HAVE_CUDA})

# XRT: Debian's libxrt-dev (headers /usr/include/xrt/xrt/xrt_*.h, included as
# "xrt/xrt_device.h" with /usr/include/xrt on the path because they include
# "xrt.h" and "xclbin.h" from there; library xrt_coreutil in the multiarch
# directory). Its xrt.pc is broken (doubled prefix), so look for the files
# themselves. NA_XRT_SHIM_ROOT is a directory built in the build tree whose
# lib/ holds symlinks to the driver shims (libxrt_noop.so.2, ...): XRT loads
# its shim from $XILINX_XRT/lib, and Debian's files are in the multiarch dir.
set(NA_HAVE_XRT 0)
if(NOT NA_XRT STREQUAL "OFF")
  find_path(NA_XRT_INC xrt/xrt_device.h PATHS /usr/include/xrt /opt/xilinx/xrt/include
            NO_DEFAULT_PATH)
  find_library(NA_XRT_LIB xrt_coreutil PATHS /opt/xilinx/xrt/lib)
  if(NA_XRT_INC AND NA_XRT_LIB)
    set(NA_HAVE_XRT 1)
    get_filename_component(NA_XRT_LIBDIR "${NA_XRT_LIB}" DIRECTORY)
    set(NA_XRT_SHIM_ROOT "${CMAKE_BINARY_DIR}/xrt-root")
    file(MAKE_DIRECTORY "${NA_XRT_SHIM_ROOT}/lib")
    file(GLOB NA_XRT_SHIMS "${NA_XRT_LIBDIR}/libxrt_*.so.2")
    foreach(shim ${NA_XRT_SHIMS})
      get_filename_component(shim_name "${shim}" NAME)
      file(CREATE_LINK "${shim}" "${NA_XRT_SHIM_ROOT}/lib/${shim_name}" SYMBOLIC)
    endforeach()
  endif()
  na_accel_found(NA_XRT ${NA_HAVE_XRT}
    "XRT found (${NA_XRT_LIB}; shim root ${NA_XRT_SHIM_ROOT})"
    "xrt/xrt_device.h or libxrt_coreutil was not found (install libxrt-dev, or NA_XRT=OFF)"
    "XRT not found, CSD backend off")
endif()

# The csd attention engine (storage-node/attn_csd.c) is built with XRT.
add_compile_definitions(NA_HAVE_CSD_ENGINE=${NA_HAVE_XRT})
add_compile_definitions(NA_HAVE_CUDA=${NA_HAVE_CUDA}
                        NA_HAVE_XRT=${NA_HAVE_XRT})
