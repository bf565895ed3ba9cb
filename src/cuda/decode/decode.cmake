# The decode family's sources (included from src/cuda/CMakeLists.txt). The
# instance files come from gen_instances.py; FSDPA_HEAD_DIMS ('all' or a
# ;-list of Dqk buckets such as 64;128) leaves the other buckets out, and
# decode_buckets.h then reports them as not compiled.
include(${CMAKE_CURRENT_LIST_DIR}/instances/instances.cmake)
target_sources(fsdpa_objects PRIVATE ${CMAKE_CURRENT_LIST_DIR}/decode_combine.cu)
list(LENGTH FSDPA_DECODE_INSTANCES fsdpa_decode_length)
math(EXPR fsdpa_decode_last "${fsdpa_decode_length} - 1")
foreach(index RANGE 0 ${fsdpa_decode_last} 3)
  math(EXPR index_v "${index} + 1")
  math(EXPR index_file "${index} + 2")
  list(GET FSDPA_DECODE_INSTANCES ${index} bucket_qk)
  list(GET FSDPA_DECODE_INSTANCES ${index_v} bucket_v)
  list(GET FSDPA_DECODE_INSTANCES ${index_file} file)
  if(FSDPA_HEAD_DIMS STREQUAL "all" OR bucket_qk IN_LIST FSDPA_HEAD_DIMS)
    target_sources(fsdpa_objects PRIVATE ${CMAKE_CURRENT_LIST_DIR}/${file})
  else()
    target_compile_definitions(fsdpa_objects PRIVATE FSDPA_DECODE_BUCKET_${bucket_qk}x${bucket_v}=0)
  endif()
endforeach()
