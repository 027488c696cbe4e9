# examples/zero_check.cmake — ctest driver (cmake -P) for the main job's data-parallel options
# under mpirun (two ranks, Adam with a 16-bit model, FP32 masters and loss scaling):
#   1. --shard-optimizer (ZeRO-1) trains bit for bit as DDP with the unsharded optimizer (the same
#      test loss and accuracy) with at most 0.55x the optimizer state per rank, and prints the
#      bytes per parameter;
#   2. its checkpoint (the unsharded state) resumes on one process exactly as the unsharded
#      run's checkpoint does (the same final test loss);
#   3. --gradient-as-bucket-view gives the default's gradients bit for bit (the same test loss);
#      --reduce-dtype f16 (loss-scaled) and bf16 train; --amp fp8 trains on two ranks (amaxes
#      all-reduced); --shard-optimizer with --gradient-as-bucket-view is refused.
# Inputs: -DTRAIN=<train_fashion_mnist> -DMPIRUN=<mpirun with its flags, ;-separated> -DWORK=<dir>
cmake_minimum_required(VERSION 3.19)  # string(JSON)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(common --model lenet5 --limit 1024 --limit-test 200 --batch-size 32 --log-every 1000 --threads 1
           --optimizer adam --lr 0.001 --amp fp16 --master-weights)

function(run name)
  execute_process(COMMAND ${ARGN} --metrics ${WORK}/${name}.csv --summary-json ${WORK}/${name}.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
function(get out name key)
  file(READ ${WORK}/${name}.json summary)
  string(JSON v GET "${summary}" ${key})
  set(${out} ${v} PARENT_SCOPE)
endfunction()
function(same a b)
  foreach(key test_loss test_accuracy)
    get(va ${a} ${key})
    get(vb ${b} ${key})
    if(NOT va STREQUAL vb)
      message(FATAL_ERROR "${key}: ${a} ${va}, ${b} ${vb} (expected bit for bit the same)")
    endif()
  endforeach()
endfunction()

run(ddp ${MPIRUN} ${TRAIN} ${common} --epochs 1 --save ${WORK}/ddp.safetensors)
run(zero ${MPIRUN} ${TRAIN} ${common} --epochs 1 --shard-optimizer --save ${WORK}/zero.safetensors)
if(NOT out MATCHES "optimizer state sharded \\(ZeRO-1\\)" OR
   NOT out MATCHES "optimizer state per rank: [0-9]+ bytes \\([0-9.]+ B/parameter\\), sharded over 2 ranks; unsharded: [0-9]+ bytes")
  message(FATAL_ERROR "--shard-optimizer: the output lacks the sharding or the bytes line:\n${out}")
endif()
same(ddp zero)
get(sharded zero optimizer_state_bytes_per_rank)
get(whole ddp optimizer_state_bytes_per_rank)
math(EXPR limit "${whole} * 55 / 100")
if(sharded GREATER limit OR sharded LESS 1)
  message(FATAL_ERROR "--shard-optimizer keeps ${sharded} bytes of optimizer state per rank, unsharded ${whole}: "
                      "expected at most 0.55x")
endif()
message(STATUS "ZeRO-1 = DDP bit for bit; optimizer state per rank ${sharded} bytes against ${whole}")

run(ddp_resumed ${TRAIN} ${common} --epochs 2 --resume ${WORK}/ddp.safetensors)
run(zero_resumed ${TRAIN} ${common} --epochs 2 --resume ${WORK}/zero.safetensors)
same(ddp_resumed zero_resumed)
run(zero_resumed_two ${MPIRUN} ${TRAIN} ${common} --epochs 2 --shard-optimizer --resume ${WORK}/zero.safetensors)
run(ddp_resumed_two ${MPIRUN} ${TRAIN} ${common} --epochs 2 --resume ${WORK}/ddp.safetensors)
same(ddp_resumed_two zero_resumed_two)
message(STATUS "the sharded checkpoint resumes on one process and sharded on two as the unsharded one does")

run(bucket_view ${MPIRUN} ${TRAIN} ${common} --epochs 1 --gradient-as-bucket-view)
same(ddp bucket_view)
run(f16 ${MPIRUN} ${TRAIN} ${common} --epochs 1 --reduce-dtype f16)
if(NOT out MATCHES "reduced in f16")
  message(FATAL_ERROR "--reduce-dtype f16:\n${out}")
endif()
run(bf16 ${MPIRUN} ${TRAIN} ${common} --epochs 1 --reduce-dtype bf16 --shard-optimizer)
run(fp8 ${MPIRUN} ${TRAIN} --model lenet5 --limit 512 --limit-test 200 --batch-size 32 --log-every 1000 --threads 1
    --epochs 1 --amp fp8)
foreach(name f16 bf16 fp8)
  get(acc ${name} test_accuracy)
  if(NOT acc MATCHES "^0\\.[3-9]")
    message(FATAL_ERROR "${name}: test accuracy ${acc}, expected >= 0.3")
  endif()
endforeach()
execute_process(COMMAND ${MPIRUN} ${TRAIN} ${common} --epochs 1 --shard-optimizer --gradient-as-bucket-view
                        --metrics ${WORK}/bad.csv --summary-json ${WORK}/bad.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "--gradient-as-bucket-view cannot be combined with --shard-optimizer")
  message(FATAL_ERROR "--shard-optimizer --gradient-as-bucket-view should be refused; got (${rc}):\n${out}\n${err}")
endif()
message(STATUS "bucket views, f16/bf16 reductions and FP8 on two ranks")
