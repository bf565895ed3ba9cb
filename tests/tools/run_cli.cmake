# Runs the fsdpa command once and checks its exit status and output.
#
#   cmake -DCLI=<fsdpa> -DARGS=<a|b|c> -DEXIT=<status regex> [-DSTDOUT=<regex>] [-DSTDERR=<regex>]
#         [-DSTDOUT_NOT=<regex>] [-DJSON_FILE=<path> -DJSON=<regex>] -P run_cli.cmake
#
# ARGS separates the command's arguments with '|'. Each regex must match
# (STDOUT_NOT must not); JSON, when given, must match the file JSON_FILE.
if(NOT DEFINED CLI OR NOT DEFINED EXIT)
  message(FATAL_ERROR "run_cli.cmake needs -DCLI and -DEXIT")
endif()
set(arguments "")
if(NOT "${ARGS}" STREQUAL "")
  string(REPLACE "|" ";" arguments "${ARGS}")
endif()
if(DEFINED JSON_FILE)
  file(REMOVE "${JSON_FILE}")
endif()

execute_process(
  COMMAND "${CLI}" ${arguments}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 280)

set(failures "")
if(NOT "${status}" MATCHES "^(${EXIT})$")
  string(APPEND failures "exit status ${status}, expected ${EXIT}\n")
endif()
if(DEFINED STDOUT AND NOT "${out}" MATCHES "${STDOUT}")
  string(APPEND failures "stdout does not match '${STDOUT}'\n")
endif()
if(DEFINED STDOUT_NOT AND "${out}" MATCHES "${STDOUT_NOT}")
  string(APPEND failures "stdout matches '${STDOUT_NOT}'\n")
endif()
if(DEFINED STDERR AND NOT "${err}" MATCHES "${STDERR}")
  string(APPEND failures "stderr does not match '${STDERR}'\n")
endif()
if(DEFINED JSON)
  if(NOT EXISTS "${JSON_FILE}")
    string(APPEND failures "${JSON_FILE} was not written\n")
  else()
    file(READ "${JSON_FILE}" json)
    if(NOT "${json}" MATCHES "${JSON}")
      string(APPEND failures "${JSON_FILE} does not match '${JSON}':\n${json}\n")
    endif()
  endif()
endif()

if(failures)
  string(REPLACE ";" " " shown "${arguments}")
  message(FATAL_ERROR "fsdpa ${shown}\n${failures}--- stdout\n${out}--- stderr\n${err}")
endif()
