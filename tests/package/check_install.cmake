# Installs the built library into a scratch prefix, then builds and runs
# tests/package/consumer against it with find_package(fsdpa): shared and
# static; shared alone with the CUDA toolkit hidden; and a C program built
# with the flags of the installed pkg-config file.
# Arguments: -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... [-DC_COMPILER=...]
file(REMOVE_RECURSE ${WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "step failed (${status}): ${ARGN}\n${output}")
  endif()
  message(STATUS "${output}")
  set(step_output "${output}" PARENT_SCOPE)
endfunction()
set(prefix ${WORK_DIR}/prefix)
step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/build
     -DCMAKE_PREFIX_PATH=${prefix})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${WORK_DIR}/build/consumer)
step(${WORK_DIR}/build/consumer_static)
step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/build-shared
     -DCMAKE_PREFIX_PATH=${prefix} -DCONSUMER_SHARED_ONLY=ON
     -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build-shared)
step(${WORK_DIR}/build-shared/consumer)

# pkg-config, moved prefix and all: the .pc file finds the library relative to itself.
find_program(PKG_CONFIG pkg-config REQUIRED)
file(RENAME ${prefix} ${WORK_DIR}/moved)
file(GLOB pc_dirs ${WORK_DIR}/moved/*/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "${pc_dirs}")
step(${PKG_CONFIG} --cflags --libs fsdpa)
set(pc_flags "${step_output}")
separate_arguments(flags UNIX_COMMAND "${pc_flags}")
file(WRITE ${WORK_DIR}/version.c
  "#include <fsdpa/c_api.h>\n#include <stdio.h>\n"
  "int main(void) { printf(\"fsdpa %s, ABI %d\\n\", fsdpa_version(), fsdpa_abi_version());\n"
  "  return fsdpa_abi_version() == FSDPA_ABI_VERSION ? 0 : 1; }\n")
step(${C_COMPILER} ${WORK_DIR}/version.c -o ${WORK_DIR}/version ${flags})
string(REGEX MATCH "-L([^ ;]+)" _ "${pc_flags}")
set(ENV{LD_LIBRARY_PATH} "${CMAKE_MATCH_1}")
step(${WORK_DIR}/version)
