# examples/image_folder_check.cmake — ctest driver (cmake -P): export a few hundred
# Fashion-MNIST images as PNGs with export_images (train/ and test/ splits), then train on that
# ImageFolder through --data; it must detect the layout and finish.
# Inputs: -DEXPORT=<export_images> -DTRAIN=<train_fashion_mnist> -DDATA=<IDX dir> -DWORK=<scratch dir>
file(REMOVE_RECURSE ${WORK})
foreach(split train test)
  set(flags --limit 200)
  if(split STREQUAL "train")
    set(flags --train --limit 300)
  endif()
  execute_process(COMMAND ${EXPORT} ${DATA} ${WORK}/png/${split} ${flags} RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "export_images ${split} failed (${rc}): ${err}")
  endif()
endforeach()
execute_process(COMMAND ${TRAIN} --data ${WORK}/png --epochs 1 --batch-size 32 --threads 2 --log-every 1000
                        --metrics ${WORK}/metrics.csv --summary-json ${WORK}/summary.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "ImageFolder in .*: 300 train / 200 test images")
  message(FATAL_ERROR "training on the ImageFolder failed (${rc}):\n${out}\n${err}")
endif()
file(READ ${WORK}/summary.json summary)
string(JSON images GET "${summary}" train_images)
if(NOT images EQUAL 300)
  message(FATAL_ERROR "expected 300 training images from the ImageFolder, the summary says ${images}")
endif()
