# colo's own CUDA kernels (CUDA builds only): plain CUDA, no LibTorch header. A new kernel is a
# .cu here, its launcher's declaration in a .h beside it, a caller in core with an ATen fallback
# for the CPU build, and a test in tests/gpu.
list(APPEND COLO_CUDA_KERNEL_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/column_sum.cu
  ${CMAKE_CURRENT_LIST_DIR}/fp8_cast.cu
  ${CMAKE_CURRENT_LIST_DIR}/gelu.cu
  ${CMAKE_CURRENT_LIST_DIR}/gelu_backward_bias.cu
  ${CMAKE_CURRENT_LIST_DIR}/image_resample.cu
  ${CMAKE_CURRENT_LIST_DIR}/layer_norm_affine_grad.cu
  ${CMAKE_CURRENT_LIST_DIR}/layer_norm_rows.cu)
