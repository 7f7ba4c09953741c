#pragma once

#include <torch/torch.h>

#include <vector>

namespace colo::amp {

// fp32 master copies of a model's working parameters, for mixed-precision training.
//
// The constructor casts each working parameter in place (same tensor object, so modules, hooks
// and optimizers that hold it keep working) to the working dtype, after taking an exact fp32
// copy of its current value. The optimizer is then built over master_params(), and each step is:
//
//   backward (working grads, in the working dtype)
//   copy_grads_to_master()          master.grad = fp32(working.grad)
//   unscale / clip / optimizer step on the masters
//   copy_master_to_working()        working = round(master)
//
// With working dtype fp32 the masters are the working parameters themselves and both copies
// are no-ops, so plugins can use one code path for every precision. Only parameters are cast:
// floating buffers (e.g. batch-norm statistics) keep their dtype.
class MasterWeights {
 public:
  // `params` must be floating-point leaf tensors (a module's parameters()).
  MasterWeights(std::vector<torch::Tensor> params, torch::Dtype working_dtype);
  MasterWeights(torch::nn::Module& module, torch::Dtype working_dtype)
      : MasterWeights(module.parameters(), working_dtype) {}

  torch::Dtype working_dtype() const { return working_dtype_; }
  // In the order of the constructor's params; master_params()[i] belongs to working_params()[i].
  const std::vector<torch::Tensor>& working_params() const { return working_; }
  const std::vector<torch::Tensor>& master_params() const { return masters_; }

  // master.grad = working.grad cast to fp32 (reusing master.grad's storage after the first
  // step). A working parameter without a gradient leaves its master without one, so that the
  // optimizer skips it, as it would have skipped the working parameter.
  void copy_grads_to_master();
  // working = master rounded to the working dtype (after the optimizer step).
  void copy_master_to_working();

 private:
  torch::Dtype working_dtype_;
  std::vector<torch::Tensor> working_;
  std::vector<torch::Tensor> masters_;
};

}  // namespace colo::amp
