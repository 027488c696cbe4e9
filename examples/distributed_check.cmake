# examples/distributed_check.cmake — ctest driver (cmake -P) for the main job under mpirun:
#   1. two ranks, FP16 autocast + loss scaling + gradient accumulation (no_sync), a checkpoint;
#      rank 0 alone prints and writes the metrics, summary and checkpoint; it learns;
#   2. one process resumes that two-rank checkpoint for a second epoch (the state is not
#      sharded, so another world size resumes it) and says the split changed;
#   3. two ranks resume it too.
# Inputs: -DTRAIN=<train_fashion_mnist> -DMPIRUN=<mpirun with its flags, ;-separated> -DWORK=<dir>
cmake_minimum_required(VERSION 3.19)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(common --limit 2048 --limit-test 500 --batch-size 32 --log-every 1000 --amp fp16 --accumulate 2 --threads 1)

function(run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run(two_ranks ${MPIRUN} ${TRAIN} ${common} --epochs 1 --metrics ${WORK}/two/metrics.csv
    --summary-json ${WORK}/two/summary.json --save ${WORK}/ck.safetensors)
foreach(want "2 ranks \\(MPI\\) x 16 images" "dynamic loss scaling" "test accuracy ([4-9][0-9]|100)\\.[0-9]+% after 1 epochs")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "two ranks: the output lacks '${want}':\n${out}")
  endif()
endforeach()
string(REGEX MATCHALL "test accuracy" reports "${out}")
list(LENGTH reports n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "two ranks: ${n} ranks reported (rank 0 alone should print):\n${out}")
endif()
file(READ ${WORK}/two/summary.json summary)
string(JSON world GET "${summary}" world_size)
if(NOT world EQUAL 2)
  message(FATAL_ERROR "two ranks: summary world_size is ${world}")
endif()

run(resume_one ${TRAIN} ${common} --epochs 2 --resume ${WORK}/ck.safetensors --metrics ${WORK}/one/metrics.csv
    --summary-json ${WORK}/one/summary.json)
if(NOT out MATCHES "written by 2 rank\\(s\\), this run has 1" OR NOT out MATCHES "after 2 epochs")
  message(FATAL_ERROR "one process resuming the two-rank checkpoint:\n${out}")
endif()
run(resume_two ${MPIRUN} ${TRAIN} ${common} --epochs 2 --resume ${WORK}/ck.safetensors
    --metrics ${WORK}/two_resumed/metrics.csv --summary-json ${WORK}/two_resumed/summary.json)
if(NOT out MATCHES "resuming from .* after epoch 1" OR NOT out MATCHES "after 2 epochs")
  message(FATAL_ERROR "two ranks resuming:\n${out}")
endif()
message(STATUS "two ranks trained, saved, and resumed on one and on two ranks")
