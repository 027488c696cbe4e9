# examples/cli_check.cmake — ctest driver (cmake -P): train_fashion_mnist refuses option values
# out of range before it does anything, with one line naming the option, its bound and the
# value given (not CLI11's "not in range 0.000000 to 1.797e308", and no negative count taken
# to mean "all").
# Inputs: -DTRAIN=<train_fashion_mnist> -DWORK=<scratch dir>
cmake_minimum_required(VERSION 3.19)
function(expect_refused expected)
  execute_process(COMMAND ${TRAIN} ${ARGN} --metrics ${WORK}/m.csv --summary-json ${WORK}/s.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(rc EQUAL 0 OR NOT err MATCHES "^${expected}\n")
    message(FATAL_ERROR "${ARGN}: expected '${expected}', got (exit ${rc}):\n${out}\n${err}")
  endif()
endfunction()
expect_refused("--batch-size: must be >= 1, got 0" --batch-size 0)
expect_refused("--limit: must be >= 0, got -5" --limit -5)
expect_refused("--limit: must be >= 0, got -5" --limit-train -5)
expect_refused("--limit-test: must be >= 0, got -1" --limit-test -1)
expect_refused("--threads: must be >= 0, got -3" --threads -3)
expect_refused("--epochs: must be >= 1, got 0" --epochs 0)
expect_refused("--accumulate: must be >= 1, got -2" --accumulate -2)
expect_refused("--max-skipped-steps: must be >= 0, got -1" --max-skipped-steps -1)
