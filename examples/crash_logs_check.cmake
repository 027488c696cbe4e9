# examples/crash_logs_check.cmake — ctest driver (cmake -P): what a killed main job leaves.
#   1. A stale checkpoint temporary (ck.safetensors.tmp, left by a save that was killed) is
#      removed when a run with --save starts, even one that fails before its first save.
#   2. A run killed with SIGKILL after its first saved epoch keeps its logs: stdout (redirected
#      to a file) has the banner and the epoch's line, and metrics.csv that epoch's step rows.
#   3. Within a long first epoch (ResNet-8 on 20000 images, one thread: 10 s or more on a fast
#      CPU, five times the flush interval; the run is killed at the first rows) the CSV's rows reach the file
#      after a few seconds, before the epoch ends (fewer than 4 KB of them: no buffer fills).
# Inputs: -DTRAIN=<train_fashion_mnist> -DWORK=<scratch dir>; needs sh, sleep and kill.
cmake_minimum_required(VERSION 3.19)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

file(WRITE ${WORK}/ck.safetensors.tmp "half a checkpoint")
execute_process(COMMAND ${TRAIN} --save ${WORK}/ck.safetensors --data ${WORK}/no_such_dataset
                        --metrics ${WORK}/m0.csv --summary-json ${WORK}/s0.json
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(rc EQUAL 0 OR EXISTS ${WORK}/ck.safetensors.tmp)
  message(FATAL_ERROR "a stale ck.safetensors.tmp was not removed at the start (exit ${rc})")
endif()

# 8 steps an epoch (256 images, batch 32) and more epochs than it will live for.
set(args --model mlp --limit 256 --limit-test 100 --batch-size 32 --threads 1 --log-every 1000 --epochs 100000
         --save ${WORK}/ck.safetensors --metrics ${WORK}/metrics.csv --summary-json ${WORK}/summary.json)
list(JOIN args " " args)
execute_process(
  COMMAND sh -c "'${TRAIN}' ${args} > '${WORK}/stdout.txt' 2> '${WORK}/stderr.txt' & pid=$!
                 i=0
                 while [ ! -f '${WORK}/ck.safetensors' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
                 kill -9 $pid; wait $pid 2> /dev/null; exit 0"
  RESULT_VARIABLE rc TIMEOUT 120)
if(NOT EXISTS ${WORK}/ck.safetensors)
  file(READ ${WORK}/stderr.txt err)
  message(FATAL_ERROR "no checkpoint within a minute:\n${err}")
endif()
file(READ ${WORK}/stdout.txt out)
if(NOT out MATCHES "mixtape: training mlp" OR NOT out MATCHES "epoch 1: train loss [0-9.]+")
  message(FATAL_ERROR "stdout of the killed run lacks the banner or the line of epoch 1:\n'${out}'")
endif()
file(STRINGS ${WORK}/metrics.csv rows)
list(LENGTH rows n)
if(n LESS 9 OR NOT rows MATCHES "^step,epoch,loss,lr,images_per_s,loss_scale,skipped;1,0,[0-9.e-]+,[^;]*;.*;8,0,")
  message(FATAL_ERROR "metrics.csv of the killed run lacks epoch 1's 8 steps (${n} lines):\n${rows}")
endif()
message(STATUS "killed after epoch 1: stdout and metrics.csv kept (${n} CSV lines)")

set(args --model resnet8 --limit 20000 --limit-test 100 --batch-size 64 --threads 1 --log-every 1000 --epochs 1
         --save ${WORK}/slow.safetensors --metrics ${WORK}/slow.csv --summary-json ${WORK}/slow.json)
list(JOIN args " " args)
execute_process(
  COMMAND sh -c "'${TRAIN}' ${args} > /dev/null 2>&1 & pid=$!
                 i=0
                 while [ \"$(cat '${WORK}/slow.csv' 2> /dev/null | wc -l)\" -lt 2 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
                 [ -f '${WORK}/slow.safetensors' ] && echo 'epoch over'
                 kill -9 $pid; wait $pid 2> /dev/null; exit 0"
  OUTPUT_VARIABLE poll TIMEOUT 120)
file(STRINGS ${WORK}/slow.csv rows)
list(LENGTH rows n)
if(n LESS 2 OR poll MATCHES "epoch over")
  message(FATAL_ERROR "no metrics row reached slow.csv before the end of the epoch (${n} lines; ${poll})")
endif()
message(STATUS "killed within epoch 1: ${n} CSV lines already in the file")
