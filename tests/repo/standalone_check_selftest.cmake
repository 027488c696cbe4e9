# tests/repo/standalone_check_selftest.cmake — shows that standalone_check.cmake catches what it
# is for: in a scratch git repository it must report a tracked file's relative path into a sibling
# shared directory and its absolute path into the development tree, each as file:line, and must
# let pass the same text in fixture data, in an untracked file, and look-alikes that stay inside
# ("network/" + "work/...", "./" + "work/...").
#
#   cmake -DWORK_DIR=<scratch dir> -P tests/repo/standalone_check_selftest.cmake
cmake_minimum_required(VERSION 3.16)

find_program(GIT git)
if(NOT GIT)
  message("SKIPPED: git not found")
  return()
endif()
if(NOT WORK_DIR)
  message(FATAL_ERROR "standalone_check_selftest: pass -DWORK_DIR=<scratch dir>")
endif()
set(check "${CMAKE_CURRENT_LIST_DIR}/standalone_check.cmake")

# The offending strings are put together here so that this file does not contain them itself.
set(dots "..")
set(tree "work")
set(rel_bad "${dots}/shared/include/x.h")
set(abs_bad "/${tree}/main/data")

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/src" "${WORK_DIR}/tests/fixtures")
file(WRITE "${WORK_DIR}/README.md" "clean\nsee ${rel_bad}\nclean\n")
file(WRITE "${WORK_DIR}/src/a.cpp" "// one\n// two\nconst char* p = \"${abs_bad}\";\n")
file(WRITE "${WORK_DIR}/src/ok.cpp" "// net${abs_bad}\n// .${abs_bad}\n")
file(WRITE "${WORK_DIR}/tests/fixtures/data.json" "{\"path\": \"${abs_bad}\"}\n")
file(WRITE "${WORK_DIR}/tests/fixtures/gen.py" "x = 1\nOUT = '${abs_bad}'\n")
execute_process(COMMAND "${GIT}" -C "${WORK_DIR}" init -q RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "standalone_check_selftest: git init failed")
endif()
execute_process(COMMAND "${GIT}" -C "${WORK_DIR}" add -A RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "standalone_check_selftest: git add failed")
endif()
file(WRITE "${WORK_DIR}/untracked.txt" "${abs_bad}\n")  # not added: not checked

execute_process(COMMAND "${CMAKE_COMMAND}" -DROOT=${WORK_DIR} -P "${check}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
set(problems "")
if(rc EQUAL 0)
  string(APPEND problems "  the check passed a repository with offenders\n")
endif()
foreach(want "README.md:2:" "src/a.cpp:3:" "tests/fixtures/gen.py:2:" "3 line(s)")
  string(FIND "${all}" "${want}" at)
  if(at LESS 0)
    string(APPEND problems "  missing from the report: ${want}\n")
  endif()
endforeach()
foreach(unwanted "src/ok.cpp" "data.json" "untracked.txt")
  string(FIND "${all}" "${unwanted}" at)
  if(NOT at LESS 0)
    string(APPEND problems "  reported although allowed: ${unwanted}\n")
  endif()
endforeach()

# The clean state passes.
file(WRITE "${WORK_DIR}/README.md" "clean\n")
file(WRITE "${WORK_DIR}/src/a.cpp" "// one\n")
file(WRITE "${WORK_DIR}/tests/fixtures/gen.py" "x = 1\n")
execute_process(COMMAND "${CMAKE_COMMAND}" -DROOT=${WORK_DIR} -P "${check}"
                RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2)
if(NOT rc2 EQUAL 0)
  string(APPEND problems "  the check failed a clean repository:\n${out2}${err2}\n")
endif()

if(NOT problems STREQUAL "")
  message(FATAL_ERROR "standalone_check_selftest:\n${problems}The check's output on the bad repository:\n${all}")
endif()
message(STATUS "standalone_check_selftest: offenders reported as file:line, allowed text passed, clean tree passes")
