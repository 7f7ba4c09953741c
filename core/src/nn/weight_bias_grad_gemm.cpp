#include "weight_bias_grad_gemm.h"

#include <torch/torch.h>

#ifdef COLO_WITH_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <stdexcept>
#include <vector>
#endif

namespace colo::nn::detail {

#ifdef COLO_WITH_CUDA_KERNELS
namespace {

// cuBLAS's advice for Hopper; what a plan uses of it is the heuristic's choice (often none).
constexpr std::size_t kWeightGradMaxWorkspaceBytes = std::size_t{32} << 20;

void check_cublaslt(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(fmt::format("colo::nn::linear backward: cuBLASLt's {} failed: {} ({})", what,
                                       cublasLtGetStatusString(status), static_cast<int>(status)));
}

// The largest power of two, up to the 256 bytes cuBLASLt assumes by default, dividing the address.
uint32_t byte_alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  uint32_t alignment = 1;
  while (alignment < 256 && address % (alignment * 2) == 0) alignment *= 2;
  return alignment;
}

// One product shape's descriptors and the algorithm cuBLASLt's heuristic chose for it, made on its
// first use and kept: asking the heuristic costs host time on every call otherwise.
struct WeightGradPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t input = nullptr, grad = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;

  WeightGradPlan() = default;
  WeightGradPlan(const WeightGradPlan&) = delete;
  WeightGradPlan& operator=(const WeightGradPlan&) = delete;
  ~WeightGradPlan() {
    if (out) cublasLtMatrixLayoutDestroy(out);
    if (grad) cublasLtMatrixLayoutDestroy(grad);
    if (input) cublasLtMatrixLayoutDestroy(input);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// In cuBLASLt's column-major terms, the row-major weight gradient [N, K] is D [K, N] = A · op(B):
// A is the input rows as they lie ([K, M], leading dimension K), B the output gradient as it lies
// ([N, M], leading dimension N) transposed to [M, N]. BGRADB sums op(B) over the product's inner
// dimension (the M rows) into one value per column of D: the bias gradient.
std::unique_ptr<WeightGradPlan> make_weight_grad_plan(int64_t m, int64_t n, int64_t k, cudaDataType_t type, const void* input_ptr,
                                const void* grad_ptr, void* out_ptr, void* bias_ptr) {
  auto plan = std::make_unique<WeightGradPlan>();
  check_cublaslt(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t no_transpose = CUBLAS_OP_N, transpose = CUBLAS_OP_T;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BGRADB;
  check_cublaslt(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose, sizeof(no_transpose)),
        "setting TRANSA");
  check_cublaslt(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &transpose, sizeof(transpose)),
        "setting TRANSB");
  check_cublaslt(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
        "setting the BGRADB epilogue");
  // The heuristic reads the bias pointer's alignment; later calls' buffers come from the same allocator.
  check_cublaslt(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)),
        "setting the bias gradient's pointer");
  check_cublaslt(cublasLtMatrixLayoutCreate(&plan->input, type, k, m, k), "cublasLtMatrixLayoutCreate (input)");
  check_cublaslt(cublasLtMatrixLayoutCreate(&plan->grad, type, n, m, n), "cublasLtMatrixLayoutCreate (gradient)");
  check_cublaslt(cublasLtMatrixLayoutCreate(&plan->out, type, k, n, k), "cublasLtMatrixLayoutCreate (weight gradient)");

  cublasLtMatmulPreference_t preference = nullptr;
  check_cublaslt(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  const auto set_preference = [&](cublasLtMatmulPreferenceAttributes_t attribute, const void* value, std::size_t size) {
    const auto status = cublasLtMatmulPreferenceSetAttribute(preference, attribute, value, size);
    if (status != CUBLAS_STATUS_SUCCESS) cublasLtMatmulPreferenceDestroy(preference);
    check_cublaslt(status, "cublasLtMatmulPreferenceSetAttribute");
  };
  const uint64_t workspace = kWeightGradMaxWorkspaceBytes;
  const uint32_t align_input = byte_alignment_of(input_ptr), align_grad = byte_alignment_of(grad_ptr);
  const uint32_t align_out = byte_alignment_of(out_ptr);
  set_preference(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_input, sizeof(uint32_t));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_grad, sizeof(uint32_t));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_out, sizeof(uint32_t));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_out, sizeof(uint32_t));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const auto status = cublasLtMatmulAlgoGetHeuristic(at::cuda::getCurrentCUDABlasLtHandle(), plan->op, plan->input,
                                                     plan->grad, plan->out, plan->out, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) return nullptr;
  check_cublaslt(status, "cublasLtMatmulAlgoGetHeuristic");
  plan->algo = result.algo;
  plan->workspace = result.workspaceSize;
  return plan;
}

// The plan for these operands, made on first use; null when cuBLASLt has no algorithm for them.
// Per thread: autograd runs each device's backward on its own thread, and the bias pointer is set
// on the shared descriptor for every call.
WeightGradPlan* weight_grad_plan_for(int64_t m, int64_t n, int64_t k, cudaDataType_t type, const void* input_ptr, const void* grad_ptr,
               void* out_ptr, void* bias_ptr, int device) {
  struct Entry {
    int64_t m, n, k;
    cudaDataType_t type;
    uint32_t align_input, align_grad;
    int device;
    std::unique_ptr<WeightGradPlan> plan;  // null: cuBLASLt has none
  };
  thread_local std::vector<Entry> cache;
  const uint32_t align_input = byte_alignment_of(input_ptr), align_grad = byte_alignment_of(grad_ptr);
  for (auto& e : cache) {
    if (e.m == m && e.n == n && e.k == k && e.type == type && e.align_input == align_input &&
        e.align_grad == align_grad && e.device == device)
      return e.plan.get();
  }
  cache.push_back({m, n, k, type, align_input, align_grad, device,
                   make_weight_grad_plan(m, n, k, type, input_ptr, grad_ptr, out_ptr, bias_ptr)});
  return cache.back().plan.get();
}

}  // namespace

bool weight_bias_grad_gemm_applies(const torch::Tensor& grad_rows, const torch::Tensor& input_rows) {
  const auto type = grad_rows.scalar_type();
  return grad_rows.is_cuda() && (type == torch::kBFloat16 || type == torch::kHalf) &&
         input_rows.scalar_type() == type && input_rows.device() == grad_rows.device() && grad_rows.dim() == 2 &&
         input_rows.dim() == 2 && grad_rows.size(0) == input_rows.size(0) && grad_rows.size(0) > 0 &&
         grad_rows.is_contiguous() && input_rows.is_contiguous();
}

std::optional<std::pair<torch::Tensor, torch::Tensor>> weight_and_bias_grad(const torch::Tensor& grad_rows,
                                                                            const torch::Tensor& input_rows) {
  TORCH_CHECK(weight_bias_grad_gemm_applies(grad_rows, input_rows),
              "colo::nn::detail::weight_and_bias_grad: operands it does not take");
  const c10::cuda::CUDAGuard guard(grad_rows.device());
  const int64_t m = grad_rows.size(0), n = grad_rows.size(1), k = input_rows.size(1);
  auto grad_weight = torch::empty({n, k}, grad_rows.options());
  auto grad_bias = torch::empty({n}, grad_rows.options());
  const auto type = grad_rows.scalar_type() == torch::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  void* bias_ptr = grad_bias.data_ptr();
  WeightGradPlan* plan = weight_grad_plan_for(m, n, k, type, input_rows.data_ptr(), grad_rows.data_ptr(), grad_weight.data_ptr(), bias_ptr,
                        grad_rows.device().index());
  if (plan == nullptr) return std::nullopt;
  check_cublaslt(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)),
        "setting the bias gradient's pointer");
  // From the caching allocator, on the current stream the product is queued on.
  auto workspace = c10::cuda::CUDACachingAllocator::get()->allocate(plan->workspace);
  const float alpha = 1.0f, beta = 0.0f;
  check_cublaslt(cublasLtMatmul(at::cuda::getCurrentCUDABlasLtHandle(), plan->op, &alpha, input_rows.data_ptr(), plan->input,
                       grad_rows.data_ptr(), plan->grad, &beta, grad_weight.data_ptr(), plan->out,
                       grad_weight.data_ptr(), plan->out, &plan->algo, workspace.get(), plan->workspace,
                       at::cuda::getCurrentCUDAStream()),
        "cublasLtMatmul");
  return std::make_pair(grad_weight, grad_bias);
}

#else

bool weight_bias_grad_gemm_applies(const torch::Tensor&, const torch::Tensor&) { return false; }

std::optional<std::pair<torch::Tensor, torch::Tensor>> weight_and_bias_grad(const torch::Tensor&,
                                                                            const torch::Tensor&) {
  TORCH_CHECK(false, "colo::nn::detail::weight_and_bias_grad: a CUDA build's (this one has no cuBLASLt)");
}

#endif

}  // namespace colo::nn::detail
