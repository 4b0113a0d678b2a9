// The definitions of optim_kernels.h's kernel slots (filled by cpu::register_kernels and
// cuda::register_kernels). Tests: tests/optim/*_test.cpp.
#include "core/optim_kernels.h"

namespace kiln {

KILN_DEFINE_KERNEL_SLOT(sgd_step);
KILN_DEFINE_KERNEL_SLOT(adamw_step);
KILN_DEFINE_KERNEL_SLOT(lars_step);
KILN_DEFINE_KERNEL_SLOT(scale_and_check_finite);
KILN_DEFINE_KERNEL_SLOT(loss_scale_unscale);
KILN_DEFINE_KERNEL_SLOT(loss_scale_update);
KILN_DEFINE_KERNEL_SLOT(sum_of_squares);
KILN_DEFINE_KERNEL_SLOT(max_abs);
KILN_DEFINE_KERNEL_SLOT(ema_update);
KILN_DEFINE_KERNEL_SLOT(ema_copy);
KILN_DEFINE_KERNEL_SLOT(write_values);
KILN_DEFINE_KERNEL_SLOT(clip_grad_norm_on_device);

}  // namespace kiln
