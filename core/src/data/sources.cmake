list(APPEND COLO_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cifar10.cpp
  ${CMAKE_CURRENT_LIST_DIR}/data_loader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset.cpp
  ${CMAKE_CURRENT_LIST_DIR}/distributed_sampler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fashion_mnist.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/idx_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/image_codec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/image_folder.cpp
  ${CMAKE_CURRENT_LIST_DIR}/image_folder_scan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/image_resample.cpp
  ${CMAKE_CURRENT_LIST_DIR}/jpeg_codec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mixup.cpp
  ${CMAKE_CURRENT_LIST_DIR}/png_codec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/image_transform.cpp
  ${CMAKE_CURRENT_LIST_DIR}/in_memory_dataset.cpp
  ${CMAKE_CURRENT_LIST_DIR}/synthetic_dataset.cpp)
