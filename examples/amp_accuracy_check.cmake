# examples/amp_accuracy_check.cmake — ctest driver (cmake -P): "no loss of accuracy" for a mixed
# precision mode (BF16, FP8, MXFP8). Runs the main job (make demo's command: SmallCNN, 3 epochs of
# Fashion-MNIST, SGD 0.05 momentum 0.9, cosine schedule, batch 128) in FP32 and with each --amp mode
# in AMP, for seeds 0 and 1, and requires each seed's test accuracy under each mode to be within
# 0.5 points of its FP32 one (one FP32 run per seed serves every mode). On a CPU with AVX512_BF16 the BF16 (and FP8, widened to BF16) GEMMs compute on
# vdpbf16ps; MIXTAPE_CPU_BF16=emulated checks the widened path.
# Inputs: -DTRAIN=<train_fashion_mnist> -DWORK=<scratch dir> [-DAMP=<--amp modes, comma-separated: bf16>]
# [-DSEEDS=<seeds, ;-separated: 0;1>]
# [-DTHREADS=<threads per run: 2>] (examples/CMakeLists.txt runs one seed per ctest entry on one
# thread, so the two run side by side). Results depend on the thread count (docs/CPU.md, "What
# stays exact"), not on which seeds run together.
cmake_minimum_required(VERSION 3.19)  # string(JSON)
if(NOT DEFINED AMP)
  set(AMP bf16)
endif()
string(REPLACE "," ";" AMP "${AMP}")
if(NOT DEFINED THREADS)
  set(THREADS 2)
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(main_job --model smallcnn --epochs 3 --batch-size 128 --lr 0.05 --momentum 0.9 --schedule cosine
             --threads ${THREADS} --log-every 100000)

function(accuracy out amp seed)
  set(name ${amp}_seed${seed})
  execute_process(COMMAND ${TRAIN} ${main_job} --amp ${amp} --seed ${seed} --metrics ${WORK}/${name}.csv
                          --summary-json ${WORK}/${name}.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train_fashion_mnist --amp ${amp} --seed ${seed} failed (${rc}):\n${log}\n${err}")
  endif()
  file(READ ${WORK}/${name}.json summary)
  string(JSON acc GET "${summary}" test_accuracy)
  set(${out} ${acc} PARENT_SCOPE)
endfunction()

# A test accuracy (a fraction of the 10,000 test images, e.g. 0.9141) in hundredths of a point:
# cmake's math is integer-only. string(JSON) gives the double with 17 digits (0.8805 reads
# 0.88049999999999995), so six digits are taken and rounded to four.
function(basis_points out fraction)
  if(NOT fraction MATCHES "^([01])(\\.([0-9]+))?$")
    message(FATAL_ERROR "unexpected test_accuracy '${fraction}'")
  endif()
  set(whole ${CMAKE_MATCH_1})
  string(SUBSTRING "${CMAKE_MATCH_3}000000" 0 6 digits)  # (math reads "080500" as decimal 80500)
  math(EXPR bp "${whole} * 10000 + (${digits} + 50) / 100")
  set(${out} ${bp} PARENT_SCOPE)
endfunction()

if(NOT DEFINED SEEDS)
  set(SEEDS 0 1)
endif()
set(failures "")
foreach(seed ${SEEDS})
  accuracy(fp32 off ${seed})
  basis_points(a ${fp32})
  foreach(mode ${AMP})
    accuracy(mixed ${mode} ${seed})
    basis_points(b ${mixed})
    math(EXPR gap "${a} - ${b}")
    if(gap LESS 0)
      math(EXPR gap "-${gap}")
    endif()
    message(STATUS "seed ${seed}: test accuracy FP32 ${fp32}, --amp ${mode} ${mixed}, gap ${gap} hundredths of a point")
    if(gap GREATER 50)
      string(APPEND failures "seed ${seed}: FP32 ${fp32} vs --amp ${mode} ${mixed}, more than 0.5 points apart\n")
    endif()
  endforeach()
endforeach()
if(failures)
  message(FATAL_ERROR "mixed precision lost accuracy:\n${failures}")
endif()
message(STATUS "--amp ${AMP} within 0.5 points of FP32 on seeds ${SEEDS}")
