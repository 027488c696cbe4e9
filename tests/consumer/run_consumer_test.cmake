# tests/consumer/run_consumer_test.cmake — the ctest `consumer_find_package`, run as
# `cmake -P`: install the current mixtape build into a fresh prefix, configure and build
# tests/consumer against that prefix only (find_package via CMAKE_PREFIX_PATH), run it.
# Invariant: the consumer sees the install, never the source or build tree — checked below
# through mixtape_DIR and by the consumer's include paths (installed headers only).
#
# Also runs examples/custom_op the same way (ctest `example_custom_op`, EXE_NAME=custom_op).
#
# Inputs (-D): MIXTAPE_BUILD_DIR, CONSUMER_SOURCE_DIR, WORK_DIR, CONFIG, GENERATOR, EXE_NAME
#   (the program the project builds, default consumer),
#   MAKE_PROGRAM, CXX_COMPILER, BUILD_TYPE, CXX_FLAGS, EXE_LINKER_FLAGS (the last two carry
#   the sanitizer flags in a MIXTAPE_SANITIZE build: an ASan-built libmixtape needs an
#   ASan-linked executable, or the runtime is not first in the library list).
cmake_minimum_required(VERSION 3.25)

foreach(v MIXTAPE_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer_test.cmake: -D${v}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})

function(step what)
  message(STATUS "consumer_find_package: ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer_find_package: ${what} failed (exit ${rc})")
  endif()
endfunction()

set(config_arg)
if(CONFIG)
  set(config_arg --config ${CONFIG})
endif()
step("install ${MIXTAPE_BUILD_DIR} -> ${prefix}"
     ${CMAKE_COMMAND} --install ${MIXTAPE_BUILD_DIR} --prefix ${prefix} ${config_arg})

set(make_arg)
if(MAKE_PROGRAM)
  set(make_arg -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
step("configure consumer"
     ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} -G ${GENERATOR} ${make_arg}
     -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
     -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
     "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
     "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}"
     -DCMAKE_PREFIX_PATH=${prefix}
     -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
     -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)

file(STRINGS ${build}/CMakeCache.txt found_dir REGEX "^mixtape_DIR:")
string(REGEX REPLACE "^mixtape_DIR:[A-Z]+=" "" found_dir "${found_dir}")
file(REAL_PATH "${found_dir}" found_dir)
file(REAL_PATH "${prefix}" real_prefix)
string(FIND "${found_dir}" "${real_prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "consumer_find_package: found mixtape in '${found_dir}', "
                      "expected under the fresh install '${real_prefix}'")
endif()

step("build consumer" ${CMAKE_COMMAND} --build ${build} ${config_arg})

if(NOT EXE_NAME)
  set(EXE_NAME consumer)
endif()
set(exe ${build}/${EXE_NAME})
if(CONFIG AND NOT EXISTS ${exe})
  set(exe ${build}/${CONFIG}/${EXE_NAME})     # multi-config generators
endif()
step("run ${exe}" ${exe})
