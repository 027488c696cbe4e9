# examples/fp8_check.cmake — ctest driver (cmake -P) for the main job's FP8 modes:
#   1. a short run per mode (--amp fp8, fp8-current, mxfp8) that learns, and one with
#      --accumulate 2 and --master-weights (a BF16 model, FP32 masters);
#   2. --checkpoint-activations under --amp fp8 (ResNet-8) gives the plain run's losses and
#      accuracy bit for bit: the recompute reopens the FP8 region with the forward's scales.
# (Resuming --amp fp8 bit for bit is resume_check.cmake's, with EXTRA.)
# Inputs: -DTRAIN=<train_fashion_mnist> -DWORK=<scratch dir>
cmake_minimum_required(VERSION 3.19)  # string(JSON)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(common --model lenet5 --epochs 1 --limit 512 --limit-test 200 --batch-size 32 --threads 2 --log-every 1000
           --optimizer adam --lr 0.003)

function(train name)
  execute_process(COMMAND ${TRAIN} ${common} --metrics ${WORK}/${name}.csv --summary-json ${WORK}/${name}.json ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train_fashion_mnist ${ARGN} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

# Each mode names its recipe, needs no loss scaler, and learns (10 classes: chance is 10%).
foreach(mode_recipe "fp8|DelayedScaling" "fp8-current|CurrentScaling" "mxfp8|MXFP8BlockScaling")
  string(REPLACE "|" ";" mr "${mode_recipe}")
  list(GET mr 0 mode)
  list(GET mr 1 recipe)
  train(${mode} --amp ${mode})
  if(NOT out MATCHES "AMP ${mode} \\(FP8 GEMMs: ${recipe}\\(" OR NOT out MATCHES "no loss scaling \\(${mode}\\)")
    message(FATAL_ERROR "--amp ${mode}: the output does not name the recipe ${recipe}:\n${out}")
  endif()
  file(READ ${WORK}/${mode}.json summary)
  string(JSON acc GET "${summary}" test_accuracy)
  string(JSON rec GET "${summary}" fp8_recipe)
  if(NOT acc MATCHES "^0\\.[4-9]" OR NOT rec MATCHES "^${recipe}\\(")
    message(FATAL_ERROR "--amp ${mode}: test accuracy ${acc} (expected >= 0.4), fp8_recipe '${rec}'")
  endif()
  message(STATUS "--amp ${mode}: test accuracy ${acc}")
endforeach()
train(fp8_accumulate --amp fp8 --accumulate 2 --master-weights)
if(NOT out MATCHES "with a 16-bit model and FP32 master weights" OR NOT out MATCHES "2 micro-batches per step")
  message(FATAL_ERROR "--amp fp8 --accumulate 2 --master-weights:\n${out}")
endif()

# Checkpointed ResNet-8 blocks recompute their forward in backward under the same FP8 region and
# scales, so the metrics (losses per logged step, test loss and accuracy) are the plain run's.
set(common --model resnet8 --epochs 1 --limit 128 --limit-test 64 --batch-size 32 --threads 2 --log-every 1
           --optimizer adam --lr 0.003)
foreach(mode fp8 mxfp8)
  train(${mode}_plain --amp ${mode})
  train(${mode}_ckpt --amp ${mode} --checkpoint-activations)
  if(NOT out MATCHES "activation checkpointing")
    message(FATAL_ERROR "--amp ${mode} --checkpoint-activations: the run does not say it checkpoints:\n${out}")
  endif()
  file(READ ${WORK}/${mode}_plain.csv plain)
  file(READ ${WORK}/${mode}_ckpt.csv ckpt)
  # Each row's step, epoch and loss (the columns after them hold the throughput, which differs).
  foreach(run plain ckpt)
    string(REGEX REPLACE "(\n[^,\n]*,[^,\n]*,[^,\n]*),[^\n]*" "\\1" ${run}_losses "${${run}}")
  endforeach()
  if(NOT plain_losses STREQUAL ckpt_losses)
    message(FATAL_ERROR "--amp ${mode} --checkpoint-activations: the per-step losses differ from the plain run's:\n"
                        "${ckpt_losses}\nplain:\n${plain_losses}")
  endif()
  foreach(json plain ckpt)
    file(READ ${WORK}/${mode}_${json}.json s)
    string(JSON ${json}_loss GET "${s}" test_loss)
    string(JSON ${json}_acc GET "${s}" test_accuracy)
  endforeach()
  if(NOT plain_loss STREQUAL ckpt_loss OR NOT plain_acc STREQUAL ckpt_acc)
    message(FATAL_ERROR "--amp ${mode} --checkpoint-activations: test loss ${ckpt_loss} / accuracy ${ckpt_acc}, "
                        "the plain run's ${plain_loss} / ${plain_acc}")
  endif()
endforeach()
message(STATUS "FP8 modes train; checkpointed runs equal the plain ones")
