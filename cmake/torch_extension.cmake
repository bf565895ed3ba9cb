# fsdpa's compiled torch binding (python/fsdpa/_torch_native.cpp): a Python
# extension module built beside libfsdpa.so, against the torch of one Python
# (FSDPA_TORCH_PYTHON; by default the first of python3 on PATH and
# /usr/bin/python3 that imports torch). fsdpa.attention finds it next to the
# library it loads; without it (or for another torch) the Python fast path
# runs. It links torch (at::empty, its Python tensor type, its current CUDA
# stream) and not libfsdpa (docs/python.md).
set(FSDPA_TORCH_EXTENSION AUTO CACHE STRING
  "Build the compiled torch binding: AUTO (when a Python with torch and its headers is found), ON, OFF")
set_property(CACHE FSDPA_TORCH_EXTENSION PROPERTY STRINGS AUTO ON OFF)
set(FSDPA_TORCH_PYTHON "" CACHE FILEPATH "The Python whose torch the binding is built for")
if(NOT FSDPA_TORCH_EXTENSION MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "FSDPA_TORCH_EXTENSION must be AUTO, ON or OFF, got '${FSDPA_TORCH_EXTENSION}'")
endif()

# Sets fsdpa_torch_skip to why the binding cannot be built (empty when it can).
function(fsdpa_torch_extension)
  set(candidates ${FSDPA_TORCH_PYTHON})
  if(NOT candidates)
    find_program(fsdpa_path_python3 NAMES python3 NO_CACHE)
    set(candidates ${fsdpa_path_python3} /usr/bin/python3)
  endif()
  # What the build needs from torch and Python, one line each.
  set(query [=[
import sysconfig, torch, torch.utils.cpp_extension as e
print("|".join(e.include_paths()))
print("|".join(e.library_paths()))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(1 if torch.version.cuda else 0)
print(sysconfig.get_config_var("EXT_SUFFIX"))
print(sysconfig.get_paths()["include"])
print(torch.__version__)
]=])
  foreach(python IN LISTS candidates)
    if(NOT EXISTS "${python}")
      continue()
    endif()
    execute_process(COMMAND ${python} -c "${query}" RESULT_VARIABLE rc OUTPUT_VARIABLE lines
      ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0)
      set(found ${python})
      break()
    endif()
  endforeach()
  set(python ${found})
  if(NOT rc EQUAL 0)
    set(fsdpa_torch_skip "no Python of '${candidates}' imports torch" PARENT_SCOPE)
    return()
  endif()
  # One field a line; the path lists joined by '|'.
  string(REPLACE ";" "," lines "${lines}")
  string(REPLACE "\n" ";" fields "${lines}")
  list(LENGTH fields count)
  if(NOT count EQUAL 7)
    set(fsdpa_torch_skip "${python}: torch's build query said '${lines}'" PARENT_SCOPE)
    return()
  endif()
  list(GET fields 0 includes)
  list(GET fields 1 library_dirs)
  list(GET fields 2 cxx11_abi)
  list(GET fields 3 with_cuda)
  list(GET fields 4 ext_suffix)
  list(GET fields 5 python_include)
  list(GET fields 6 torch_version)
  string(REPLACE "|" ";" includes "${includes}")
  string(REPLACE "|" ";" library_dirs "${library_dirs}")
  if(NOT EXISTS "${python_include}/Python.h")
    set(fsdpa_torch_skip "${python}: no Python.h in ${python_include} (Debian: python3-dev)" PARENT_SCOPE)
    return()
  endif()
  # torch's Python headers include pybind11's, which a distribution may
  # package apart (Debian: pybind11-dev).
  find_path(fsdpa_pybind11_include pybind11/pybind11.h HINTS ${includes} ${python_include}
    NO_CACHE)
  if(NOT fsdpa_pybind11_include)
    set(fsdpa_torch_skip "${python}: no pybind11/pybind11.h beside torch's headers or in the system's (Debian: pybind11-dev)" PARENT_SCOPE)
    return()
  endif()
  set(libraries)
  set(names torch torch_cpu c10 torch_python)
  set(cuda 0)
  if(with_cuda AND TARGET CUDA::toolkit)
    list(APPEND names c10_cuda)
    set(cuda 1)
  endif()
  foreach(name IN LISTS names)
    find_library(fsdpa_torch_library_${name} NAMES ${name} PATHS ${library_dirs} NO_DEFAULT_PATH
      NO_CACHE)
    if(NOT fsdpa_torch_library_${name})
      set(fsdpa_torch_skip "${python}: no lib${name} in ${library_dirs}" PARENT_SCOPE)
      return()
    endif()
    list(APPEND libraries ${fsdpa_torch_library_${name}})
  endforeach()

  add_library(fsdpa_torch_native MODULE python/fsdpa/_torch_native.cpp)
  set_target_properties(fsdpa_torch_native PROPERTIES
    PREFIX "" OUTPUT_NAME _torch_native SUFFIX "${ext_suffix}"
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
    CXX_VISIBILITY_PRESET hidden)
  target_include_directories(fsdpa_torch_native PRIVATE ${CMAKE_SOURCE_DIR}/include)
  target_include_directories(fsdpa_torch_native SYSTEM PRIVATE ${includes} ${python_include})
  target_compile_definitions(fsdpa_torch_native PRIVATE
    _GLIBCXX_USE_CXX11_ABI=${cxx11_abi} FSDPA_TORCH_CUDA=${cuda}
    TORCH_EXTENSION_NAME=_torch_native)
  target_link_libraries(fsdpa_torch_native PRIVATE ${libraries})
  if(cuda)
    # cuda_runtime_api.h only: cudaStreamIsCapturing resolves in the CUDA
    # runtime that torch's c10_cuda loads (the module links no runtime).
    target_include_directories(fsdpa_torch_native SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  fsdpa_warnings(fsdpa_torch_native)
  file(WRITE ${CMAKE_BINARY_DIR}/torch_binding.txt "_torch_native${ext_suffix}\n")
  message(STATUS "fsdpa: torch binding for torch ${torch_version} of ${python} (CUDA ${cuda})")
  set(fsdpa_torch_skip "" PARENT_SCOPE)
  set(FSDPA_TORCH_NATIVE_PYTHON ${python} PARENT_SCOPE)  # the Python tests require it under this one
endfunction()

# torch_binding.txt in the build directory names the module where the target
# is configured (setup.py reads it).
file(REMOVE ${CMAKE_BINARY_DIR}/torch_binding.txt)
if(NOT FSDPA_TORCH_EXTENSION STREQUAL "OFF")
  fsdpa_torch_extension()
  if(fsdpa_torch_skip)
    if(FSDPA_TORCH_EXTENSION STREQUAL "ON")
      message(FATAL_ERROR "fsdpa: FSDPA_TORCH_EXTENSION=ON but ${fsdpa_torch_skip}")
    endif()
    message(STATUS "fsdpa: no torch binding: ${fsdpa_torch_skip}")
  endif()
endif()
