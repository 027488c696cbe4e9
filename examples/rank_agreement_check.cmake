# examples/rank_agreement_check.cmake — ctest driver (cmake -P) for the main job's cross-rank
# checks under an MPMD mpirun, each rank started in its own folder (-wdir), as with node-local
# copies of a checkpoint:
#   1. --resume ck.safetensors where rank 0's file is at epoch 2 and rank 1's at epoch 1: an
#      error naming rank 1 and the epoch, at the start (not a hang, not rank 0's false success);
#   2. two epoch-1 files with different weights (one written by one process, one by two ranks):
#      an error naming rank 1 and the first differing tensor;
#   3. two identical copies: trains (the check passes on equal state);
#   4. one option that changes the computation given differently to rank 1 (--momentum,
#      --weight-decay, --limit-test): refused, naming the option and both values.
# Inputs: -DTRAIN=<train_fashion_mnist> -DMPIEXEC=<mpiexec with its flags, ;-separated, no rank
# count> -DNP=<its rank-count flag> -DWORK=<scratch dir>
cmake_minimum_required(VERSION 3.19)
file(REMOVE_RECURSE ${WORK})
foreach(d a b b2 c)
  file(MAKE_DIRECTORY ${WORK}/${d})
endforeach()
set(base --model lenet5 --limit 256 --batch-size 32 --threads 1 --log-every 1000)
set(common ${base} --limit-test 100)

function(run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

# rank 0 in folder `dir0`, rank 1 in `dir1`, both with `args` (after ARGS) and their own extra
# options (after EXTRA0 / EXTRA1); paths in args are relative to each rank's folder.
function(mpmd name dir0 dir1)
  cmake_parse_arguments(M "" "" "ARGS;EXTRA0;EXTRA1;EXPECT" ${ARGN})
  execute_process(COMMAND ${MPIEXEC} ${NP} 1 -wdir ${WORK}/${dir0} ${TRAIN} ${M_ARGS} ${M_EXTRA0}
                          : ${NP} 1 -wdir ${WORK}/${dir1} ${TRAIN} ${M_ARGS} ${M_EXTRA1}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(M_EXPECT)
    if(rc EQUAL 0 OR NOT err MATCHES "${M_EXPECT}")
      message(FATAL_ERROR "${name}: expected an error matching '${M_EXPECT}', got (exit ${rc}):\n${out}\n${err}")
    endif()
  elseif(NOT rc EQUAL 0 OR NOT out MATCHES "after 2 epochs")
    message(FATAL_ERROR "${name}: expected it to train, got (exit ${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${name}: ok")
endfunction()

run(epoch1 ${TRAIN} ${common} --epochs 1 --save ${WORK}/b/ck.safetensors --metrics ${WORK}/b/m.csv
    --summary-json ${WORK}/b/s.json)
file(COPY_FILE ${WORK}/b/ck.safetensors ${WORK}/a/ck.safetensors)
file(COPY_FILE ${WORK}/b/ck.safetensors ${WORK}/b2/ck.safetensors)
run(epoch2 ${TRAIN} ${common} --epochs 2 --resume ${WORK}/a/ck.safetensors --save ${WORK}/a/ck.safetensors
    --metrics ${WORK}/a/m.csv --summary-json ${WORK}/a/s.json)
run(epoch1_two_ranks ${MPIEXEC} ${NP} 2 ${TRAIN} ${common} --epochs 1 --save ${WORK}/c/ck.safetensors
    --metrics ${WORK}/c/m.csv --summary-json ${WORK}/c/s.json)

set(resume ${common} --resume ck.safetensors --metrics m.csv --summary-json s.json)
mpmd(other_epoch a b ARGS ${resume} --epochs 3
     EXPECT "rank 1's starting state differs from rank 0's at epoch: rank 1 has 1, rank 0 has 2; every rank restores --resume 'ck.safetensors' itself")
mpmd(other_weights b c ARGS ${resume} --epochs 2
     EXPECT "rank 1's starting state differs from rank 0's at tensor 'model\\.[^']+': rank 1 has f32\\[[0-9, ]+\\] #[0-9a-f]+, rank 0 has f32\\[[0-9, ]+\\] #[0-9a-f]+; every rank restores")
mpmd(same_copies b b2 ARGS ${resume} --epochs 2)

set(fresh ${common} --epochs 1 --metrics m.csv --summary-json s.json)
mpmd(momentum a b ARGS ${fresh} EXTRA0 --momentum 0.9 EXTRA1 --momentum 0.5
     EXPECT "rank 1 was started with --momentum 0.5, rank 0 with 0.9: every rank must get the same options")
mpmd(weight_decay a b ARGS ${fresh} EXTRA1 --weight-decay 0.01
     EXPECT "rank 1 was started with --weight-decay 0.01, rank 0 with 0.0")
mpmd(limit_test a b ARGS ${base} --epochs 1 --metrics m.csv --summary-json s.json EXTRA0 --limit-test 1000 EXTRA1 --limit-test 600
     EXPECT "rank 1 was started with --limit-test 600, rank 0 with 1000")
