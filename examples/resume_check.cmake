# examples/resume_check.cmake — ctest driver (cmake -P) for train_fashion_mnist's checkpoints:
#   1. an uninterrupted 3-epoch run,
#   2. the same run stopped after epoch 2 (--epochs 2 --save),
#   3. resumed from that checkpoint for the third epoch (--epochs 3 --resume),
# and requires 1 and 3 to report bit-identical test_accuracy and test_loss (JSON numbers are
# printed round-trip exact). Then resuming that checkpoint with another --lr must be refused,
# naming both values, and into another model must fail naming the first mismatched tensor.
# Inputs: -DTRAIN=<train_fashion_mnist> -DWORK=<scratch dir> [-DEXTRA=<more options, ;-separated>]
# With EXTRA (e.g. --amp;fp16;--master-weights) the loss scaler, the 16-bit model and its FP32
# masters must resume exactly too (final_loss_scale and skipped_steps compared as well).
cmake_minimum_required(VERSION 3.19)  # string(JSON)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
# LeNet-5 keeps the three runs to a few seconds; --augment puts the loader's random streams in play.
set(common --limit 128 --limit-test 100 --batch-size 32 --threads 2 --log-every 1000 --augment ${EXTRA})

function(train name)
  execute_process(COMMAND ${TRAIN} ${common} --model lenet5 --metrics ${WORK}/${name}.csv --summary-json ${WORK}/${name}.json ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train_fashion_mnist (${name}) failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

train(uninterrupted --epochs 3)
train(first_two --epochs 2 --save ${WORK}/ck.safetensors)
train(resumed --epochs 3 --resume ${WORK}/ck.safetensors)

file(READ ${WORK}/uninterrupted.json a)
file(READ ${WORK}/resumed.json b)
set(keys test_accuracy test_loss)
if(EXTRA)
  list(APPEND keys final_loss_scale skipped_steps)
endif()
foreach(key ${keys})
  string(JSON va GET "${a}" ${key})
  string(JSON vb GET "${b}" ${key})
  if(NOT va STREQUAL vb)
    message(FATAL_ERROR "resume changed ${key}: uninterrupted ${va}, stopped after epoch 2 and resumed ${vb}")
  endif()
  message(STATUS "${key}: ${va} (uninterrupted) == ${vb} (resumed)")
endforeach()
string(JSON resumed_from GET "${b}" resumed_from_epoch)
if(NOT resumed_from EQUAL 2)
  message(FATAL_ERROR "the resumed run did not start after epoch 2 (resumed_from_epoch ${resumed_from})")
endif()

if(EXTRA)
  return()  # the mismatch cases below are about the options and the model section; once is enough
endif()
# A new --lr is refused, naming both values: the optimizer's state would bring the old one back.
execute_process(COMMAND ${TRAIN} ${common} --model lenet5 --epochs 3 --lr 0.01 --resume ${WORK}/ck.safetensors
                        --metrics ${WORK}/lr.csv --summary-json ${WORK}/lr.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "was saved with --lr 0\\.05, this run has 0\\.01; resume with the same options \\(the optimizer's state carries --lr over")
  message(FATAL_ERROR "resuming with another --lr should be refused naming both values; got (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${TRAIN} ${common} --model smallcnn --epochs 3 --resume ${WORK}/ck.safetensors
                        --metrics ${WORK}/bad.csv --summary-json ${WORK}/bad.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "first mismatch 'model.conv1.weight': expected f32\\[32, 1, 3, 3\\], the checkpoint has f32\\[6, 1, 5, 5\\]")
  message(FATAL_ERROR "resuming a lenet5 checkpoint as smallcnn should fail naming model.conv1.weight; got (${rc}):\n${err}")
endif()
