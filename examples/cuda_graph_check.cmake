# examples/cuda_graph_check.cmake — ctest driver (cmake -P) for train_fashion_mnist --cuda-graph:
# the same run on CUDA, eager and with each step replayed as a CUDA graph, must write the same
# CSV rows (step, epoch, loss, lr, loss_scale, skipped: everything but the images/s timing) and
# report the same summary numbers, bit for bit (JSON numbers are printed round-trip exact):
# test_accuracy, test_loss, each epoch's train_loss and train_accuracy, final_loss_scale,
# skipped_steps. The graphed run must say that it captured the step and replayed it.
# Inputs: -DTRAIN=<train_fashion_mnist> -DWORK=<scratch dir> -DARGS=<options, space-separated>
# [-DEXPECT_ERROR=<regex>: both runs must fail with this error, after the same CSV rows]
# [-DMIN_SKIPPED=<n>: the runs must have skipped at least n steps (the one-step-late skip path)]
# [-DDEVICE=<cuda:N>: the device, cuda by default]
# [-DLAUNCH=<launcher and its options, a list>: e.g. mpirun -np 2 (both runs under it; rank 0
#  writes the CSV and the summary)].
cmake_minimum_required(VERSION 3.19)  # string(JSON)
separate_arguments(args UNIX_COMMAND "${ARGS}")
if(NOT DEVICE)
  set(DEVICE cuda)
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(train name)
  execute_process(COMMAND ${LAUNCH} ${TRAIN} ${args} --device ${DEVICE} --threads 1 --log-every 1000 --metrics ${WORK}/${name}.csv
                          --summary-json ${WORK}/${name}.json ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(EXPECT_ERROR)
    if(rc EQUAL 0 OR NOT err MATCHES "${EXPECT_ERROR}")
      message(FATAL_ERROR "train_fashion_mnist (${name}) should fail with '${EXPECT_ERROR}'; got (${rc}):\n${out}\n${err}")
    endif()
    set(${name}_err "${err}" PARENT_SCOPE)
  elseif(NOT rc EQUAL 0)
    message(FATAL_ERROR "train_fashion_mnist (${name}) failed (${rc}):\n${out}\n${err}")
  endif()
  set(${name}_out "${out}" PARENT_SCOPE)
endfunction()

train(eager)
train(graphed --cuda-graph)
if(NOT graphed_out MATCHES "CUDA graph: the step was captured after 3 eager warm-up steps; the later steps replay it")
  message(FATAL_ERROR "the --cuda-graph run did not capture the step:\n${graphed_out}")
endif()
if(NOT EXPECT_ERROR AND NOT graphed_out MATCHES "CUDA graph: [1-9][0-9]* steps replayed")
  message(FATAL_ERROR "the --cuda-graph run did not replay the captured step:\n${graphed_out}")
endif()

# The CSV without its images_per_s column (5th): a timing.
function(csv_rows path out_var)
  file(STRINGS ${path} lines)
  set(rows "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^([^,]*,[^,]*,[^,]*,[^,]*),[^,]*,(.*)$" "\\1,\\2" row "${line}")
    list(APPEND rows "${row}")
  endforeach()
  set(${out_var} "${rows}" PARENT_SCOPE)
endfunction()
csv_rows(${WORK}/eager.csv want)
csv_rows(${WORK}/graphed.csv got)
list(LENGTH want n)
if(n LESS 2)
  message(FATAL_ERROR "the eager run wrote no steps to its CSV")
endif()
if(NOT want STREQUAL got)
  string(REPLACE ";" "\n" want_text "${want}")
  string(REPLACE ";" "\n" got_text "${got}")
  message(FATAL_ERROR "the CSV rows differ.\neager:\n${want_text}\ngraphed:\n${got_text}")
endif()
math(EXPR steps "${n} - 1")
message(STATUS "${steps} CSV rows equal (step, epoch, loss, lr, loss_scale, skipped)")

if(EXPECT_ERROR)
  if(NOT eager_err STREQUAL graphed_err)
    message(FATAL_ERROR "the errors differ:\neager: ${eager_err}\ngraphed: ${graphed_err}")
  endif()
  return()
endif()
file(READ ${WORK}/eager.json a)
file(READ ${WORK}/graphed.json b)
set(paths "test_accuracy" "test_loss" "final_loss_scale" "skipped_steps")
string(JSON epochs LENGTH "${a}" per_epoch)
math(EXPR last "${epochs} - 1")
foreach(e RANGE ${last})
  list(APPEND paths "per_epoch:${e}:train_loss" "per_epoch:${e}:train_accuracy" "per_epoch:${e}:test_loss")
endforeach()
foreach(path IN LISTS paths)
  string(REPLACE ":" ";" keys "${path}")
  string(JSON va GET "${a}" ${keys})
  string(JSON vb GET "${b}" ${keys})
  if(NOT va STREQUAL vb)
    message(FATAL_ERROR "${path}: eager ${va}, graphed ${vb}")
  endif()
  message(STATUS "${path}: ${va} (eager) == ${vb} (graphed)")
endforeach()
if(DEFINED MIN_SKIPPED)
  string(JSON skipped GET "${a}" skipped_steps)
  if(skipped LESS MIN_SKIPPED)
    message(FATAL_ERROR "the runs skipped ${skipped} steps, fewer than ${MIN_SKIPPED}: the skip path was not tested")
  endif()
endif()
