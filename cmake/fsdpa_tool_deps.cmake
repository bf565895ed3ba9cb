# CLI11 (argument parsing), nlohmann/json (JSON) and {fmt} (formatting) for
# the `fsdpa` command and the benchmarks, used header-only (Debian:
# libcli11-dev nlohmann-json3-dev libfmt-dev; elsewhere, point
# CMAKE_INCLUDE_PATH at a directory holding CLI/, nlohmann/ and fmt/). The
# library itself needs none of them.
find_path(FSDPA_CLI11_INCLUDE_DIR CLI/CLI.hpp)
find_path(FSDPA_JSON_INCLUDE_DIR nlohmann/json.hpp)
find_path(FSDPA_FMT_INCLUDE_DIR fmt/format-inl.h)
foreach(dir FSDPA_CLI11_INCLUDE_DIR FSDPA_JSON_INCLUDE_DIR FSDPA_FMT_INCLUDE_DIR)
  if(NOT ${dir})
    message(FATAL_ERROR "fsdpa: ${dir} not found: the command and the benchmarks need CLI11, "
      "nlohmann/json and {fmt} headers (Debian: apt-get install libcli11-dev nlohmann-json3-dev "
      "libfmt-dev; or -DCMAKE_INCLUDE_PATH=...; or -DFSDPA_BUILD_TOOLS=OFF -DFSDPA_BUILD_BENCH=OFF)")
  endif()
endforeach()
add_library(fsdpa_tool_deps INTERFACE)
target_include_directories(fsdpa_tool_deps SYSTEM INTERFACE
  ${FSDPA_CLI11_INCLUDE_DIR} ${FSDPA_JSON_INCLUDE_DIR} ${FSDPA_FMT_INCLUDE_DIR}
  ${CMAKE_CURRENT_LIST_DIR}/../tools/support)
target_compile_definitions(fsdpa_tool_deps INTERFACE FMT_HEADER_ONLY)
