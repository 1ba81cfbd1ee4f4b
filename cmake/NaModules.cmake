# cmake/NaModules.cmake — the arrows of docs/architecture.md, enforced by the
# build: a module's headers are reachable only through its library.
#
# Sources include headers by their path from the tree's root
# ("common/model.h", "rdma/session.h"). Instead of putting the root on every
# target's include path (which let any file include any header), each module
# folder F gets a staging folder <build>/na-include/F holding one link,
# F -> <source>/F, and F's library puts that staging folder on its PUBLIC
# include path: the files of F and of every target linking F's library see
# "F/..." headers, nothing else does. So `#include "storage-node/x.h"` in
# compute-node/ fails to compile ("No such file"), because na_compute does not
# link na_storage; the arrows are the libraries' links. The other targets of
# a module's folder (object libraries, the CUDA parts) get their own folder
# PRIVATE. tests/ is not a module: its targets see the whole tree.
# tests/arch_includes.sh (ctest test_arch_includes) checks every #include
# against the documented table as well.

# Stage folder F and return the staging folder in ${out}.
function(na_module_stage folder out)
  set(stage ${CMAKE_BINARY_DIR}/na-include/${folder})
  file(MAKE_DIRECTORY ${stage})
  if(NOT EXISTS ${stage}/${folder})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${folder} ${stage}/${folder} SYMBOLIC)
  endif()
  set(${out} ${stage} PARENT_SCOPE)
endfunction()

# na_module_includes(FOLDER [LIBRARY]): LIBRARY (the module's library) gets
# FOLDER's staging folder PUBLIC, every other compiled target defined in
# FOLDER's CMakeLists.txt PRIVATE.
function(na_module_includes folder)
  na_module_stage(${folder} stage)
  get_property(targets DIRECTORY ${CMAKE_SOURCE_DIR}/${folder} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "UTILITY" OR type STREQUAL "INTERFACE_LIBRARY")
      continue()
    endif()
    if(ARGC GREATER 1 AND t STREQUAL ARGV1)
      target_include_directories(${t} PUBLIC ${stage})
    else()
      target_include_directories(${t} PRIVATE ${stage})
    endif()
  endforeach()
endfunction()
