list(APPEND COLO_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/vit_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/init.cpp
  ${CMAKE_CURRENT_LIST_DIR}/deferred_weight_grads.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear.cpp
  ${CMAKE_CURRENT_LIST_DIR}/layer_norm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/drop_path.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shard_spec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/layer_stack.cpp
  ${CMAKE_CURRENT_LIST_DIR}/patch_embedding.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mlp.cpp
  ${CMAKE_CURRENT_LIST_DIR}/encoder_block.cpp
  ${CMAKE_CURRENT_LIST_DIR}/classifier_head.cpp
  ${CMAKE_CURRENT_LIST_DIR}/vision_transformer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/resnet.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pretrained.cpp)
