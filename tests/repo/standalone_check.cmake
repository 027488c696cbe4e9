# tests/repo/standalone_check.cmake — the repository stands alone: no git-tracked file may point
# outside the checkout, through a relative path into a sibling `shared` directory (two dots, a
# slash, "shared", a slash) or an absolute path into the development machine's tree (a slash,
# "work", a slash). Fixture data under tests/fixtures/ is not searched (its generator scripts
# are). Each offender is listed as file:line:text, and the check fails.
#
#   cmake [-DROOT=<checkout>] -P tests/repo/standalone_check.cmake
#
# Outside a git checkout (a source tarball) there is nothing to check: it prints "SKIPPED: ..."
# (the ctest's skip marker) and succeeds. The patterns are spelled so that this file does not
# match them itself.
cmake_minimum_required(VERSION 3.16)

if(NOT DEFINED ROOT)
  get_filename_component(ROOT "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
endif()

find_program(GIT git)
if(NOT GIT)
  message("SKIPPED: git not found, cannot list the tracked files of ${ROOT}")
  return()
endif()
execute_process(COMMAND "${GIT}" -C "${ROOT}" rev-parse --is-inside-work-tree
                RESULT_VARIABLE in_tree OUTPUT_QUIET ERROR_QUIET)
if(NOT in_tree EQUAL 0)
  message("SKIPPED: ${ROOT} is not a git checkout")
  return()
endif()

# EREs for git grep. The first: two dots, then the shared directory. The second: the absolute
# tree, where the character before its leading slash cannot belong to a path component (so
# "net/" + "work/" or "./" + "work/" do not count).
set(relative_shared [[\.\./shared/]])
set(absolute_work [[(^|[^A-Za-z0-9_.~-])/wor[k]/]])

# Tracked files only (git grep's default), text only (-I), in the working tree's current state.
execute_process(
  COMMAND "${GIT}" -C "${ROOT}" -c core.quotePath=false grep --no-color -n -I -E
          -e "${relative_shared}" -e "${absolute_work}" -- .
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc GREATER 1)
  message(FATAL_ERROR "standalone_check: git grep failed (exit ${rc}): ${err}")
endif()

# One "file:line:text" per match. Walked with string(FIND), not as a CMake list: a line may hold
# semicolons or an unbalanced bracket, which would split a list in the wrong places.
set(offenders "")
set(count 0)
string(APPEND out "\n")
while(TRUE)
  string(FIND "${out}" "\n" nl)
  if(nl LESS 0)
    break()
  endif()
  string(SUBSTRING "${out}" 0 ${nl} line)
  math(EXPR rest "${nl} + 1")
  string(SUBSTRING "${out}" ${rest} -1 out)
  if(line STREQUAL "")
    if(out STREQUAL "")
      break()
    endif()
    continue()
  endif()
  # Fixture data is exempt; the scripts that generate it are not.
  if(line MATCHES "^tests/fixtures/" AND NOT line MATCHES "^tests/fixtures/[^:]*\\.(py|sh|md|txt|cmake):")
    continue()
  endif()
  string(LENGTH "${line}" len)
  if(len GREATER 300)
    string(SUBSTRING "${line}" 0 300 line)
    string(APPEND line " ...")
  endif()
  string(APPEND offenders "  ${line}\n")
  math(EXPR count "${count} + 1")
endwhile()

if(count GREATER 0)
  message(FATAL_ERROR "standalone_check: ${count} line(s) in tracked files of ${ROOT} point outside the "
          "repository (a relative path into a sibling shared directory, or an absolute path into the "
          "development machine's tree). A clone elsewhere would not have them: refer to files inside "
          "the repository instead.\n${offenders}")
endif()
message(STATUS "standalone_check: no tracked file of ${ROOT} points outside the repository")
