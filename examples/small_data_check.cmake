# examples/small_data_check.cmake — ctest driver (cmake -P): train_fashion_mnist on ImageFolders
# it cannot train on must stop with one error that says why, the program's name once before it:
#  - one 4x3 PNG per split (a seed of tests/fuzz): fewer images than one batch of 128, so the
#    message counts the images and names the batch size, drop_last and --accumulate rule;
#  - the 105-byte BMP the image fuzzer found (it declares 8195x7170 at 24 bits): refused from
#    its header, naming the file, instead of a second and 280 MB of decoding.
# Inputs: -DTRAIN=<train_fashion_mnist> -DFUZZ=<tests/fuzz folder> -DWORK=<scratch dir>
function(expect_error name image file_name expected)
  set(dir ${WORK}/${name})
  file(REMOVE_RECURSE ${dir})
  foreach(split train test)
    file(MAKE_DIRECTORY ${dir}/${split}/0)
    file(COPY_FILE ${image} ${dir}/${split}/0/${file_name})
  endforeach()
  execute_process(COMMAND ${TRAIN} --data ${dir} --model mlp --threads 1 --metrics ${dir}/metrics.csv
                          --summary-json ${dir}/summary.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "^train_fashion_mnist: ${expected}" OR err MATCHES "train_fashion_mnist: train_")
    message(FATAL_ERROR "${name}: expected one 'train_fashion_mnist: ' then '${expected}', got (exit ${rc}):\n${err}")
  endif()
endfunction()

expect_error(one_image ${FUZZ}/corpus/image/gray.png a.png
             "the training set has 1 image; with --batch-size 128 and the last partial batch dropped \\(drop_last\\) "
             "an epoch has 0 batches, fewer than --accumulate 1 \\(one step needs 128 images")
expect_error(huge_bmp ${FUZZ}/regressions/image/bmp-negative-compression-huge-frame a.bmp
             "decode_image: '[^']*/train/0/a\\.bmp': BMP compression 3520188794 at byte 30 is not decoded")
